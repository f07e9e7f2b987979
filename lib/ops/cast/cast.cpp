// Autograd for kiln::cast, the cast that kiln's autocast kernels use on the CPU: a
// torch::autograd::Function whose backward casts the gradient back to the input's
// dtype with the op itself, so gradients of gradients work.
#include <torch/autograd.h>
#include <torch/library.h>

#include "../autograd_support.h"
#include "../ops.h"

namespace kiln::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class CastFunction : public torch::autograd::Function<CastFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, at::ScalarType dtype) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->saved_data["from"] = static_cast<int64_t>(x.scalar_type());
    return kiln::ops::cast(x, dtype);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto from = static_cast<at::ScalarType>(ctx->saved_data["from"].toInt());
    return {kiln::ops::cast(grad_outputs[0], from), at::Tensor()};
  }
};

at::Tensor cast_autograd(const at::Tensor& x, at::ScalarType dtype) {
  return record_or_call<CastFunction>(&kiln::ops::cast, x, dtype);
}

// Whether autocast_cast goes through kiln::cast, as autocast::cast<CPU> does.
bool kiln_casts(const at::Tensor& t) { return t.is_cpu() && t.layout() == at::kStrided; }

}  // namespace

at::Tensor autocast_cast(const at::Tensor& t, at::ScalarType dtype) {
  // at::autocast::is_eligible: a floating tensor but float64 (on the region's device).
  if (!t.defined() || !t.is_floating_point() || t.scalar_type() == at::kDouble || t.scalar_type() == dtype)
    return t;
  return kiln_casts(t) ? kiln::ops::cast(t, dtype) : t.to(dtype);
}

at::Tensor autocast_cast_backward(const at::Tensor& grad, at::ScalarType from) {
  if (!grad.defined() || grad.scalar_type() == from) return grad;
  // CastFunction's backward above; ToCopyBackward0's (at::to) for autocast's at::to.
  return kiln_casts(grad) ? kiln::ops::cast(grad, from) : grad.to(from);
}

TORCH_LIBRARY_IMPL(kiln, Autograd, m) { m.impl("cast", cast_autograd); }

}  // namespace kiln::ops
