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

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Autograd, m) { m.impl("cast", cast_autograd); }

}  // namespace kiln::ops
