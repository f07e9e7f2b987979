// What the ops' Autograd kernels (<op>/<op>.cpp) share: whether a call has to be
// recorded at all, and the kernel of a single-output op built on that.
#pragma once
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>

#include <optional>

namespace kiln::ops {

inline bool requires_grad(const at::Tensor& t) { return t.defined() && t.requires_grad(); }
inline bool requires_grad(const std::optional<at::Tensor>& t) { return t && requires_grad(*t); }
template <typename T>
bool requires_grad(const T&) {  // a non-tensor argument (alpha, a mask)
  return false;
}

/// True when autograd has to record a call with these arguments: grad mode is on
/// and a tensor among them requires grad. Otherwise an Autograd kernel calls the
/// op below autograd (at::AutoDispatchBelowADInplaceOrView) instead of building a
/// graph node only to throw it away, as ATen's own generated kernels do; on a
/// 2^16-element relu that node cost more than the kernel's margin over ATen.
/// Example: if (!records(x)) { at::AutoDispatchBelowADInplaceOrView below; return relu(x); }
template <typename... Args>
bool records(const Args&... args) {
  return at::GradMode::is_enabled() && (requires_grad(args) || ...);
}

/// The Autograd kernel of a single-output op: Fn::apply(args...) (Fn a
/// torch::autograd::Function) when the call must be recorded, else op(args...)
/// below autograd. Example: return record_or_call<ReluFunction>(&kiln::ops::relu, x);
template <typename Fn, typename Op, typename... Args>
at::Tensor record_or_call(Op op, const Args&... args) {
  if (records(args...)) return Fn::apply(args...);
  at::AutoDispatchBelowADInplaceOrView below;
  return op(args...);
}

}  // namespace kiln::ops
