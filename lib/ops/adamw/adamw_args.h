// What the fused_adamw_ kernels share: the checks of list lengths, shapes, dtypes
// and devices (CPU, CUDA and Meta); the raw spans of every tensor and the layout
// fix-up for tensors that are not dense or do not share their parameter's strides,
// updated in dense copies and copied back (CPU and CUDA).
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>

#include <vector>

#include "../op_support.h"
#include "adamw_kernel.h"

namespace kiln::ops {

struct FusedAdamWArgs {
  DType dtype = DType::kFloat;
  std::vector<AdamWSpan> spans;  // one per non-empty tensor
  AdamWCoefficients coefficients{};
  // (tensor the caller passed, dense working copy) for every copy that was made;
  // copy_back() writes the results of the mutated ones back.
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;
  std::vector<at::Tensor> read_only_copies;  // gradients in the parameter's layout

  void copy_back() {
    for (auto& [original, work] : copies) original.copy_(work);
  }
};

/// Throws unless the four lists have one length, step >= 1, the betas lie in [0, 1),
/// and params[i], grads[i], exp_avgs[i] and exp_avg_sqs[i] are dense tensors of one
/// shape, with every tensor of one floating dtype and device. Reads no data: the CPU,
/// CUDA and Meta kernels all run it. Example: check_fused_adamw(ps, gs, ms, vs, 0.9, 0.999, step);
inline void check_fused_adamw(at::TensorList params, at::TensorList grads,
                              at::TensorList exp_avgs, at::TensorList exp_avg_sqs, double beta1,
                              double beta2, int64_t step) {
  constexpr const char* op = "kiln::fused_adamw_";
  const size_t n = params.size();
  TORCH_CHECK(grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n, op,
              ": expected lists of one length, got ", n, " params, ", grads.size(), " grads, ",
              exp_avgs.size(), " exp_avgs and ", exp_avg_sqs.size(), " exp_avg_sqs");
  TORCH_CHECK(step >= 1, op, ": step: expected >= 1 (the step count including this update), got ",
              step);
  TORCH_CHECK(beta1 >= 0 && beta1 < 1, op, ": beta1: expected in [0, 1), got ", beta1);
  TORCH_CHECK(beta2 >= 0 && beta2 < 1, op, ": beta2: expected in [0, 1), got ", beta2);
  if (n == 0) return;
  check_floating(op, "params[0]", params[0]);
  for (size_t i = 0; i < n; ++i) {
    const auto name = [&](const char* list) { return c10::str(list, "[", i, "]"); };
    const at::Tensor& p = params[i];
    TORCH_CHECK(p.defined() && p.layout() == at::kStrided, op, ": ", name("params"),
                ": expected a dense tensor");
    TORCH_CHECK(p.scalar_type() == params[0].scalar_type(), op, ": ", name("params"),
                ": expected dtype ", params[0].scalar_type(),
                " (every tensor of one call shares the dtype of params[0]), got ", p.scalar_type());
    TORCH_CHECK(p.device() == params[0].device(), op, ": ", name("params"), ": expected device ",
                params[0].device(), " (the device of params[0]), got ", p.device());
    check_like(op, name("params"), p, name("grads"), grads[i]);
    check_like(op, name("params"), p, name("exp_avgs"), exp_avgs[i]);
    check_like(op, name("params"), p, name("exp_avg_sqs"), exp_avg_sqs[i]);
    TORCH_CHECK(grads[i].layout() == at::kStrided, op, ": ", name("grads"),
                ": expected a dense gradient, got layout ", grads[i].layout());
  }
}

/// check_fused_adamw, then the spans the kernels update (with dense working copies
/// where a tensor's layout needs one) and the step's coefficients.
inline FusedAdamWArgs fused_adamw_args(at::TensorList params, at::TensorList grads,
                                       at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                                       double lr, double beta1, double beta2,
                                       double weight_decay, double eps, int64_t step) {
  check_fused_adamw(params, grads, exp_avgs, exp_avg_sqs, beta1, beta2, step);
  const size_t n = params.size();
  FusedAdamWArgs a;
  a.coefficients = adamw_coefficients(lr, beta1, beta2, weight_decay, eps, step);
  if (n == 0) return a;
  a.dtype = kernel_dtype(params[0]);
  a.spans.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& p = params[i];
    if (p.numel() == 0) continue;
    // The kernels walk raw memory, so all four must be dense in one layout: the
    // parameter's own when it is dense, else contiguous.
    at::Tensor pw = p.is_non_overlapping_and_dense() ? p : p.contiguous();
    if (!pw.is_same(p)) a.copies.emplace_back(p, pw);
    const auto like_p = [&](const at::Tensor& x, bool written) {
      if (x.strides() == pw.strides()) return x;
      auto w = at::empty_like(pw);
      w.copy_(x);
      if (written) a.copies.emplace_back(x, w);
      return w;
    };
    const at::Tensor g = like_p(grads[i], false);
    at::Tensor m = like_p(exp_avgs[i], true);
    at::Tensor v = like_p(exp_avg_sqs[i], true);
    a.spans.push_back({pw.data_ptr(), g.const_data_ptr(), m.data_ptr(), v.data_ptr(), pw.numel()});
    if (!g.is_same(grads[i])) a.read_only_copies.push_back(g);  // owns a span's memory
  }
  return a;
}

}  // namespace kiln::ops
