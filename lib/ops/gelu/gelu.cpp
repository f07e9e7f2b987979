// Autograd and autocast for kiln::gelu. Backward is the gelu_backward op (the
// exact derivative of the tanh form); gelu_backward is differentiable in turn, its
// derivative in x being grad·gelu''(x), so gradients of gradients work.
//
// Why not the documents' FusedGELU backward: it differentiates a sigmoid
// approximation (x·σ(1.702x)) while its forward is the tanh form, so its gradient
// is not the derivative of what forward computed; gradient checks would fail.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "../autocast.h"
#include "../autograd_support.h"
#include "../ops.h"
#include "gelu_math.h"
#include "gelu_second_derivative.h"

namespace kiln::ops {

namespace detail {

// gelu''(x) = s(1−s)·(4u' + 2x·u'' + 4x·u'²·(1−2s)), s = σ(2u), u' = k(1 + 3c·x²),
// u'' = 6kc·x: the derivative of gelu_math::derivative.
at::Tensor gelu_second_derivative(const at::Tensor& x) {
  constexpr double k = gelu_math::kSqrt2OverPi, c = gelu_math::kCoeff;
  const auto x2 = x * x;
  const auto du = k * (1 + 3 * c * x2);
  const auto d2u = (6 * k * c) * x;
  const auto s = at::sigmoid((2 * k) * x * (1 + c * x2));
  return s * (1 - s) * (4 * du + 2 * x * d2u + 4 * x * du * du * (1 - 2 * s));
}

}  // namespace detail

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class GeluBackwardFunction : public torch::autograd::Function<GeluBackwardFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& grad, const at::Tensor& x) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({grad, x});
    return kiln::ops::gelu_backward(grad, x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& grad = saved[0];
    const auto& x = saved[1];
    const auto& gg = grad_outputs[0];
    return {kiln::ops::gelu_backward(gg, x), gg * grad * detail::gelu_second_derivative(x)};
  }
};

class GeluFunction : public torch::autograd::Function<GeluFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({x});
    return kiln::ops::gelu(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    return {kiln::ops::gelu_backward(grad_outputs[0], ctx->get_saved_variables()[0])};
  }
};

at::Tensor gelu_autograd(const at::Tensor& x) {
  return record_or_call<GeluFunction>(&kiln::ops::gelu, x);
}

at::Tensor gelu_backward_autograd(const at::Tensor& grad, const at::Tensor& x) {
  return record_or_call<GeluBackwardFunction>(&kiln::ops::gelu_backward, grad, x);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Autograd, m) {
  m.impl("gelu", gelu_autograd);
  m.impl("gelu_backward", gelu_backward_autograd);
}

KILN_AUTOCAST_KEEP_DTYPE("gelu", kiln::ops::gelu)

}  // namespace kiln::ops
