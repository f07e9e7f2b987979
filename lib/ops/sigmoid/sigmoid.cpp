// Autograd and autocast for kiln::sigmoid: a torch::autograd::Function that saves
// only the output s and calls the sigmoid_backward op, which is itself
// differentiable, so gradients of gradients (create_graph) work; under autocast
// sigmoid keeps its input's dtype.
#include <torch/autograd.h>
#include <torch/library.h>

#include "../autocast.h"
#include "../autograd_support.h"
#include "../ops.h"

namespace kiln::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// sigmoid_backward(g, s) = clamp(beta·s·(1−s), ±clip)·g. Its derivative in g is
// the same clamped local derivative (sigmoid_backward again); in s it is
// beta·(1−2s)·g where the clamp is inactive and 0 where it holds the value flat.
class SigmoidBackwardFunction : public torch::autograd::Function<SigmoidBackwardFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& grad, const at::Tensor& s,
                            double beta, std::optional<double> grad_clip) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({grad, s});
    ctx->saved_data["beta"] = beta;
    ctx->saved_data["grad_clip"] = grad_clip;
    return kiln::ops::sigmoid_backward(grad, s, beta, grad_clip);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& grad = saved[0];
    const auto& s = saved[1];
    const double beta = ctx->saved_data["beta"].toDouble();
    const auto grad_clip = ctx->saved_data["grad_clip"].toOptional<double>();
    const auto& gg = grad_outputs[0];
    if (!gg.defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    at::Tensor d_grad, d_s;
    if (ctx->needs_input_grad(0)) d_grad = kiln::ops::sigmoid_backward(gg, s, beta, grad_clip);
    if (ctx->needs_input_grad(1)) {
      d_s = gg * grad * (beta * (1 - 2 * s));
      if (grad_clip) d_s = d_s.masked_fill((beta * s * (1 - s)).abs() > *grad_clip, 0);
    }
    return {d_grad, d_s, at::Tensor(), at::Tensor()};
  }
};

class SigmoidFunction : public torch::autograd::Function<SigmoidFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, double beta,
                            std::optional<double> grad_clip) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto s = kiln::ops::sigmoid(x, beta, grad_clip);
    ctx->save_for_backward({s});
    ctx->saved_data["beta"] = beta;
    ctx->saved_data["grad_clip"] = grad_clip;
    return s;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto s = ctx->get_saved_variables()[0];
    const double beta = ctx->saved_data["beta"].toDouble();
    const auto grad_clip = ctx->saved_data["grad_clip"].toOptional<double>();
    return {kiln::ops::sigmoid_backward(grad_outputs[0], s, beta, grad_clip), at::Tensor(),
            at::Tensor()};
  }
};

at::Tensor sigmoid_autograd(const at::Tensor& x, double beta, std::optional<double> grad_clip) {
  return record_or_call<SigmoidFunction>(&kiln::ops::sigmoid, x, beta, grad_clip);
}

at::Tensor sigmoid_backward_autograd(const at::Tensor& grad, const at::Tensor& s, double beta,
                                     std::optional<double> grad_clip) {
  return record_or_call<SigmoidBackwardFunction>(&kiln::ops::sigmoid_backward, grad, s, beta,
                                                 grad_clip);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Autograd, m) {
  m.impl("sigmoid", sigmoid_autograd);
  m.impl("sigmoid_backward", sigmoid_backward_autograd);
}

KILN_AUTOCAST_KEEP_DTYPE("sigmoid", kiln::ops::sigmoid)

}  // namespace kiln::ops
