// CPU kernels of kiln::cross_entropy_forward and kiln::cross_entropy_backward as
// registered Tensor functions: check, make contiguous, allocate, split the rows
// over threads, call the vectorised raw kernel built for this CPU.
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "../op_support.h"
#include "cross_entropy_args.h"
#include "cross_entropy_kernel.h"

namespace kiln::ops {
namespace {

// Rows per task: about kElementwiseGrain elements.
int64_t row_grain(int64_t classes) { return std::max<int64_t>(1, kElementwiseGrain / classes); }

// Σ nll / B in double, in row order: the same loss for any thread count.
template <typename A>
double mean_of(const A* nll, int64_t rows) {
  double sum = 0.0;
  for (int64_t i = 0; i < rows; ++i) sum += nll[i];
  return rows > 0 ? sum / static_cast<double>(rows) : std::numeric_limits<double>::quiet_NaN();
}

// The loss as a 0-dim tensor of `options`' dtype, written in place (at::full would be
// two more dispatcher calls, a third of the op's time at a few rows).
at::Tensor scalar_of(double v, const at::TensorOptions& options) {
  auto out = at::empty({}, options);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "kiln::cross_entropy_forward",
                                  [&] { *out.data_ptr<scalar_t>() = static_cast<scalar_t>(v); });
  return out;
}

std::tuple<at::Tensor, at::Tensor> cross_entropy_forward_cpu(const at::Tensor& logits,
                                                             const at::Tensor& target) {
  const auto a = cross_entropy_args("kiln::cross_entropy_forward", logits, target);
  const auto acc = cross_entropy_acc_dtype(logits);
  auto lse = at::empty({a.rows}, logits.options().dtype(acc));
  const auto dtype = kernel_dtype(a.logits);
  const auto kernel = cpu::cross_entropy_forward_impl();
  const auto* t = a.target.const_data_ptr<int64_t>();
  // The per-row losses, of the accumulation type (zero's), are scratch: summed, never returned.
  const auto mean_loss = [&](auto zero) {
    std::vector<decltype(zero)> nll(a.rows);
    at::parallel_for(0, a.rows, row_grain(a.classes), [&](int64_t begin, int64_t end) {
      kernel(dtype, elem_ptr(a.logits, begin * a.classes), t + begin, elem_ptr(lse, begin),
             nll.data() + begin, end - begin, a.classes);
    });
    return mean_of(nll.data(), a.rows);
  };
  const double mean = acc == at::kDouble ? mean_loss(0.0) : mean_loss(0.0f);
  return {scalar_of(mean, logits.options()), lse};
}

at::Tensor cross_entropy_backward_cpu(const at::Tensor& grad, const at::Tensor& logits,
                                      const at::Tensor& target, const at::Tensor& lse) {
  const char* op = "kiln::cross_entropy_backward";
  const auto a = cross_entropy_args(op, logits, target);
  check_cross_entropy_backward(op, grad, lse, a);
  auto out = output_like(a.logits);
  if (a.rows == 0) return out;
  const auto lc = lse.contiguous();
  // The one value read in place: grad is a CPU scalar (checked), and item() would be
  // a dispatcher call per step that the sync count (tests/train) treats as a host read.
  const double scale = AT_DISPATCH_FLOATING_TYPES_AND2(
                           at::kHalf, at::kBFloat16, grad.scalar_type(), "kiln::cross_entropy_backward",
                           [&] { return static_cast<double>(*grad.const_data_ptr<scalar_t>()); }) /
                       static_cast<double>(a.rows);
  const auto dtype = kernel_dtype(a.logits);
  const auto kernel = cpu::cross_entropy_backward_impl();
  const auto* t = a.target.const_data_ptr<int64_t>();
  at::parallel_for(0, a.rows, row_grain(a.classes), [&](int64_t begin, int64_t end) {
    kernel(dtype, elem_ptr(a.logits, begin * a.classes), t + begin, elem_ptr(lc, begin),
           elem_ptr(out, begin * a.classes), end - begin, a.classes, scale);
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("cross_entropy_forward", cross_entropy_forward_cpu);
  m.impl("cross_entropy_backward", cross_entropy_backward_cpu);
}

}  // namespace kiln::ops
