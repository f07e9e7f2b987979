// CPU kernels of kiln::layer_norm_forward and kiln::layer_norm_backward: the checks,
// contiguous operands and outputs around the vectorised row kernels, the rows spread
// over threads; the backward's weight and bias gradients are summed per thread, then
// over threads.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <vector>

#include "layer_norm_args.h"
#include "layer_norm_kernel.h"

namespace kiln::ops {
namespace {

// Rows per task: a few hundred KiB of a (…, 192) float32 input.
constexpr int64_t kRowGrain = 64;

const void* data_or_null(const std::optional<at::Tensor>& t) {
  return t && t->defined() ? t->const_data_ptr() : nullptr;
}

// Σ over `threads` rows of c partial sums (x's accumulation type A), in thread order,
// into a new (c) tensor of x's dtype.
template <typename A>
at::Tensor sum_partials(const A* partials, int64_t threads, const at::Tensor& x) {
  const int64_t c = x.size(-1);
  auto out = at::empty({c}, x.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "kiln::layer_norm_backward", [&] {
    auto* o = out.data_ptr<scalar_t>();
    for (int64_t j = 0; j < c; ++j) {
      A s = partials[j];
      for (int64_t t = 1; t < threads; ++t) s += partials[t * c + j];
      o[j] = static_cast<scalar_t>(s);
    }
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_forward_cpu(
    const at::Tensor& x, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    double eps, std::optional<at::ScalarType> out_dtype) {
  const char* op = "kiln::layer_norm_forward";
  const auto z = layer_norm_sizes(op, x, weight, bias, eps);
  const auto y_dtype = layer_norm_out_dtype(op, x, out_dtype);
  const auto xc = x.contiguous();
  std::optional<at::Tensor> w, b;
  if (weight && weight->defined()) w = weight->contiguous();
  if (bias && bias->defined()) b = bias->contiguous();
  auto y = at::empty(x.sizes(), x.options().dtype(y_dtype));
  advise_huge_pages(y);
  const auto rows = x.sizes().slice(0, x.dim() - 1);
  auto mean = at::empty(rows, x.options().dtype(layer_norm_acc_dtype(x)));
  auto rstd = at::empty_like(mean);
  const auto kernel = cpu::layer_norm_forward_impl();
  const auto xd = kernel_dtype(xc), yd = kernel_dtype(y);
  at::parallel_for(0, z.rows, kRowGrain, [&](int64_t begin, int64_t end) {
    kernel(xd, yd, xc.const_data_ptr(), data_or_null(w), data_or_null(b), y.data_ptr(), mean.data_ptr(),
           rstd.data_ptr(), z.c, eps, begin, end);
  });
  return {std::move(y), std::move(mean), std::move(rstd)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward_cpu(
    const at::Tensor& grad, const at::Tensor& x, const std::optional<at::Tensor>& weight,
    const at::Tensor& mean, const at::Tensor& rstd, std::array<bool, 3> output_mask) {
  const char* op = "kiln::layer_norm_backward";
  const auto z = layer_norm_sizes(op, x, weight, std::nullopt, 0.0);
  check_layer_norm_backward(op, grad, x, mean, rstd);
  const auto xc = x.contiguous(), gc = grad.contiguous(), mc = mean.contiguous(), rc = rstd.contiguous();
  std::optional<at::Tensor> w;
  if (weight && weight->defined()) w = weight->contiguous();
  at::Tensor dx, dw, db;
  if (output_mask[0]) dx = at::empty(x.sizes(), x.options()), advise_huge_pages(dx);
  const bool want_dw = output_mask[1] && w, want_db = output_mask[2];
  // One row of partial sums per thread (and per task where a thread takes several):
  // at::get_thread_num() indexes them. They live in a zeroed scratch vector and are
  // summed over threads by the loop below, not in two at::zeros and two at::sum: those
  // four dispatcher round trips cost more than the whole backward of a few rows (0.41×
  // ATen's time at one row of 192, kiln_bench_ops --sizes 0).
  const int64_t threads = at::get_num_threads();
  const auto kernel = cpu::layer_norm_backward_impl();
  const auto xd = kernel_dtype(xc), gd = kernel_dtype(gc);
  const auto run = [&](auto zero) {  // A, the accumulation type, from zero's
    using A = decltype(zero);
    std::vector<A> partials(2 * threads * z.c, zero);  // dw's rows, then db's
    A* dw_acc = want_dw ? partials.data() : nullptr;
    A* db_acc = want_db ? partials.data() + threads * z.c : nullptr;
    at::parallel_for(0, z.rows, kRowGrain, [&](int64_t begin, int64_t end) {
      const int64_t t = at::get_thread_num();
      TORCH_CHECK(t < threads, "kiln::layer_norm_backward: thread ", t, " of a pool of ", threads,
                  " (the partial sums have one row per thread)");
      kernel(xd, gd, gc.const_data_ptr(), xc.const_data_ptr(), data_or_null(w), mc.const_data_ptr(),
             rc.const_data_ptr(), output_mask[0] ? dx.data_ptr() : nullptr,
             dw_acc ? dw_acc + t * z.c : nullptr, db_acc ? db_acc + t * z.c : nullptr, z.c, begin, end);
    });
    if (want_dw) dw = sum_partials(dw_acc, threads, x);
    if (want_db) db = sum_partials(db_acc, threads, x);
  };
  if (layer_norm_acc_dtype(x) == at::kDouble) run(0.0);
  else run(0.0f);
  return {std::move(dx), std::move(dw), std::move(db)};
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("layer_norm_forward", layer_norm_forward_cpu);
  m.impl("layer_norm_backward", layer_norm_backward_cpu);
}

}  // namespace kiln::ops
