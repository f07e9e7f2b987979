// CPU kernels of kiln::batch_norm_forward and kiln::batch_norm_backward: the checks,
// the layout (channels last as rows of C, contiguous as planes), the per-channel
// statistics and constants (float64 sums over per-thread partials, added in thread
// order: the same result for the same thread count), and the vectorised passes of
// batch_norm_cpu_kernel.cpp spread over threads. Two passes a direction: the forward
// reads x for its statistics and again for y (ATen's reads it three times: the mean,
// the variance, y); the backward reads grad and x for its sums and again for dx, the
// ReLU's mask recomputed from x instead of read from y.
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

#include "../op_support.h"
#include "batch_norm_args.h"

namespace kiln::ops {
namespace {

// Runs per task: about 32 K values.
int64_t grain(const cpu::BatchNormLayout& l) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, l.run())); }

// Per-thread partial sums of two per-channel quantities, over the runs of x.
struct Partials {
  int64_t threads, c;
  std::vector<double> a, b;
  Partials(int64_t threads_, int64_t c_) : threads(threads_), c(c_), a(threads_ * c_, 0.0), b(threads_ * c_, 0.0) {}
  template <typename F>
  void run(const char* op, int64_t runs, int64_t grain_size, F f) {
    at::parallel_for(0, runs, grain_size, [&](int64_t begin, int64_t end) {
      const int64_t t = at::get_thread_num();
      TORCH_CHECK(t < threads, op, ": thread ", t, " of a pool of ", threads,
                  " (the partial sums have one row per thread)");
      f(a.data() + t * c, b.data() + t * c, begin, end);
    });
  }
  double sum_a(int64_t j) const { return total(a, j); }
  double sum_b(int64_t j) const { return total(b, j); }

 private:
  double total(const std::vector<double>& v, int64_t j) const {
    double s = 0.0;
    for (int64_t t = 0; t < threads; ++t) s += v[t * c + j];
    return s;
  }
};

// scale = w·invstd and shift = b − mean·scale, in float32: the forward and the backward
// compute them alike from the saved float32 mean and invstd, so the backward's
// recomputed pre-activation is the forward's bit for bit (the ReLU's mask).
void affine_of(const at::Tensor& w, const at::Tensor& b, const float* mean, const float* invstd,
               std::vector<float>& scale, std::vector<float>& shift) {
  const auto wc = w.contiguous(), bc = b.contiguous();
  const float* wp = wc.const_data_ptr<float>();
  const float* bp = bc.const_data_ptr<float>();
  for (size_t j = 0; j < scale.size(); ++j) {
    scale[j] = wp[j] * invstd[j];
    shift[j] = bp[j] - mean[j] * scale[j];
  }
}

// Each channel's first value of x as float32 (the shift of the shifted sums).
std::vector<float> first_values(const at::Tensor& xc, const cpu::BatchNormLayout& l) {
  std::vector<float> k(l.c, 0.0f);
  if (xc.numel() == 0) return k;
  // The first row's c values, or each plane's first of the first image.
  const auto first = xc.as_strided({l.c}, {l.rows ? 1 : l.s});
  const auto f = first.to(at::kFloat).contiguous();
  std::copy_n(f.const_data_ptr<float>(), l.c, k.begin());
  return k;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_forward_cpu(
    const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, at::Tensor& running_mean,
    at::Tensor& running_var, bool training, double momentum, double eps, bool relu) {
  const char* op = "kiln::batch_norm_forward";
  check_batch_norm(op, x, weight, bias, running_mean, running_var, momentum, eps);
  const int64_t count = batch_norm_count(x);
  TORCH_CHECK(!training || count > 1, op, ": x: expected more than 1 value per channel when training, got shape ",
              x.sizes());
  TORCH_CHECK(training || (running_mean.defined() && running_var.defined()), op,
              ": running_mean, running_var: expected tensors in evaluation (training = false), got undefined ones");
  const auto format = batch_norm_format(x);
  const auto xc = x.contiguous(format);
  const auto l = batch_norm_layout(xc, format);
  const int64_t runs = l.runs(xc.numel());
  auto mean = at::empty({l.c}, x.options().dtype(at::kFloat));
  auto invstd = at::empty({l.c}, x.options().dtype(at::kFloat));
  float* mp = mean.data_ptr<float>();
  float* ip = invstd.data_ptr<float>();
  const auto xd = kernel_dtype(xc);
  if (training) {
    const auto k = first_values(xc, l);
    Partials sums(at::get_num_threads(), l.c);
    const auto kernel = cpu::batch_norm_stats_impl();
    sums.run(op, runs, grain(l), [&](double* s, double* q, int64_t begin, int64_t end) {
      kernel(xd, l, xc.const_data_ptr(), k.data(), s, q, begin, end);
    });
    const double n = static_cast<double>(count);
    float* rm = running_mean.defined() ? running_mean.data_ptr<float>() : nullptr;
    float* rv = running_var.defined() ? running_var.data_ptr<float>() : nullptr;
    for (int64_t j = 0; j < l.c; ++j) {
      const double d = sums.sum_a(j) / n;  // mean − k
      const double var = std::max(0.0, sums.sum_b(j) / n - d * d);
      mp[j] = static_cast<float>(k[j] + d);
      ip[j] = static_cast<float>(1.0 / std::sqrt(var + eps));
      if (rm) rm[j] = static_cast<float>((1.0 - momentum) * rm[j] + momentum * (k[j] + d));
      if (rv) rv[j] = static_cast<float>((1.0 - momentum) * rv[j] + momentum * var * n / (n - 1.0));
    }
  } else {
    const auto rm = running_mean.contiguous(), rv = running_var.contiguous();
    for (int64_t j = 0; j < l.c; ++j) {
      mp[j] = rm.const_data_ptr<float>()[j];
      ip[j] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(rv.const_data_ptr<float>()[j]) + eps));
    }
  }
  std::vector<float> scale(l.c), shift(l.c);
  affine_of(weight, bias, mp, ip, scale, shift);
  auto y = output_like(xc);
  const auto apply = cpu::batch_norm_apply_impl();
  at::parallel_for(0, runs, grain(l), [&](int64_t begin, int64_t end) {
    apply(xd, l, xc.const_data_ptr(), scale.data(), shift.data(), relu, y.data_ptr(), begin, end);
  });
  return {std::move(y), std::move(mean), std::move(invstd)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward_cpu(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
    const at::Tensor& mean, const at::Tensor& invstd, bool training, bool relu, std::array<bool, 3> output_mask) {
  const char* op = "kiln::batch_norm_backward";
  check_batch_norm(op, x, weight, bias, mean, invstd, 0.0, 0.0, {"mean", "invstd"});
  TORCH_CHECK(mean.defined() && invstd.defined(), op, ": mean, invstd: expected the forward's, got undefined ones");
  TORCH_CHECK(grad.defined() && grad.sizes() == x.sizes(), op, ": grad: expected shape ", x.sizes(), " (x's), got ",
              grad.defined() ? grad.sizes() : at::IntArrayRef{});
  TORCH_CHECK(grad.scalar_type() == x.scalar_type(), op, ": grad: expected dtype ", x.scalar_type(),
              " (x's), got ", grad.scalar_type());
  TORCH_CHECK(grad.device() == x.device(), op, ": grad: expected device ", x.device(), ", got ", grad.device());
  const auto format = batch_norm_format(x);
  const auto xc = x.contiguous(format), gc = grad.contiguous(format);
  const auto l = batch_norm_layout(xc, format);
  const int64_t runs = l.runs(xc.numel());
  const auto mc = mean.contiguous(), ic = invstd.contiguous();
  const float* mp = mc.const_data_ptr<float>();
  const float* ip = ic.const_data_ptr<float>();
  std::vector<float> scale(l.c), shift(l.c);
  affine_of(weight, bias, mp, ip, scale, shift);
  const auto xd = kernel_dtype(xc);
  Partials sums(at::get_num_threads(), l.c);
  const auto sums_kernel = cpu::batch_norm_grad_sums_impl();
  sums.run(op, runs, grain(l), [&](double* dz, double* dzx, int64_t begin, int64_t end) {
    sums_kernel(xd, l, gc.const_data_ptr(), xc.const_data_ptr(), scale.data(), shift.data(), mp, relu, dz, dzx,
                begin, end);
  });
  at::Tensor dx, dw, db;
  if (output_mask[1]) dw = at::empty({l.c}, weight.options());
  if (output_mask[2]) db = at::empty({l.c}, bias.options());
  std::vector<float> k1(l.c, 0.0f), k0(l.c, 0.0f);
  const double n = static_cast<double>(batch_norm_count(x));
  for (int64_t j = 0; j < l.c; ++j) {
    const double s_dz = sums.sum_a(j), s_dzx = sums.sum_b(j), is = ip[j];
    if (dw.defined()) dw.data_ptr<float>()[j] = static_cast<float>(s_dzx * is);
    if (db.defined()) db.data_ptr<float>()[j] = static_cast<float>(s_dz);
    if (training && n > 0) {  // dx = a·(dz − mean(dz) − x̂·mean(dz·x̂)), x̂ = (x − μ)·invstd
      k1[j] = static_cast<float>(-static_cast<double>(scale[j]) * is * is * s_dzx / n);
      k0[j] = static_cast<float>(-static_cast<double>(scale[j]) * s_dz / n);
    }
  }
  if (output_mask[0]) {
    dx = output_like(xc);
    const auto kernel = cpu::batch_norm_grad_input_impl();
    at::parallel_for(0, runs, grain(l), [&](int64_t begin, int64_t end) {
      kernel(xd, l, gc.const_data_ptr(), xc.const_data_ptr(), scale.data(), shift.data(), relu, mp, scale.data(),
             k1.data(), k0.data(), dx.data_ptr(), begin, end);
    });
  }
  return {std::move(dx), std::move(dw), std::move(db)};
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("batch_norm_forward", batch_norm_forward_cpu);
  m.impl("batch_norm_backward", batch_norm_backward_cpu);
}

}  // namespace kiln::ops
