// Autograd and autocast for kiln::bias_gelu. Forward saves x and b (not x + b:
// backward recomputes it in its single pass); bias_gelu_backward is differentiable
// in turn through gelu''(x + b).
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "../autocast.h"
#include "../autograd_support.h"
#include "../gelu/gelu_second_derivative.h"
#include "../ops.h"

namespace kiln::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// (dx, db) = (g·gelu'(z), Σ_rows g·gelu'(z)), z = x + b. With incoming gradients
// (gdx, gdb), let h = gdx + gdb (broadcast over rows): then d/dg = h·gelu'(z),
// d/dx = h·g·gelu''(z), d/db = Σ_rows h·g·gelu''(z).
class BiasGeluBackwardFunction : public torch::autograd::Function<BiasGeluBackwardFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& grad, const at::Tensor& x,
                               const at::Tensor& b) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({grad, x, b});
    auto [dx, db] = kiln::ops::bias_gelu_backward(grad, x, b);
    return {dx, db};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto &grad = saved[0], &x = saved[1], &b = saved[2];
    at::Tensor h = grad_outputs[0].defined() ? grad_outputs[0] : at::zeros_like(x);
    if (grad_outputs[1].defined()) h = h + grad_outputs[1];
    const auto dgrad = std::get<0>(kiln::ops::bias_gelu_backward(h, x, b));
    const auto dz = h * grad * detail::gelu_second_derivative(x + b);
    return {dgrad, dz, dz.reshape({-1, b.size(0)}).sum(0)};
  }
};

class BiasGeluFunction : public torch::autograd::Function<BiasGeluFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& b) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({x, b});
    return kiln::ops::bias_gelu(x, b);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    auto [dx, db] = kiln::ops::bias_gelu_backward(grad_outputs[0], saved[0], saved[1]);
    return {dx, db};
  }
};

at::Tensor bias_gelu_autograd(const at::Tensor& x, const at::Tensor& b) {
  return record_or_call<BiasGeluFunction>(&kiln::ops::bias_gelu, x, b);
}

std::tuple<at::Tensor, at::Tensor> bias_gelu_backward_autograd(const at::Tensor& grad,
                                                               const at::Tensor& x,
                                                               const at::Tensor& b) {
  if (!records(grad, x, b)) {
    at::AutoDispatchBelowADInplaceOrView below;
    return kiln::ops::bias_gelu_backward(grad, x, b);
  }
  const auto out = BiasGeluBackwardFunction::apply(grad, x, b);
  return {out[0], out[1]};
}

// Autocast: bias_gelu runs in x's dtype; a bias of another dtype (an fp32
// parameter beside fp16 activations) is cast to it, through autocast's cache.
template <c10::DeviceType D>
at::Tensor bias_gelu_autocast(const at::Tensor& x, const at::Tensor& b) {
  autocast::Below<D> below;
  return kiln::ops::bias_gelu(x, autocast::cast<D>(b, x.scalar_type()));
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Autograd, m) {
  m.impl("bias_gelu", bias_gelu_autograd);
  m.impl("bias_gelu_backward", bias_gelu_backward_autograd);
}

KILN_AUTOCAST_KERNELS("bias_gelu", bias_gelu_autocast)

}  // namespace kiln::ops
