// Autograd and autocast for kiln::relu: a torch::autograd::Function that saves
// only the output and calls the relu_backward op, which is itself differentiable,
// so gradients of gradients (create_graph) work; under autocast relu keeps its
// input's dtype.
#include <torch/autograd.h>
#include <torch/library.h>

#include "../autocast.h"
#include "../autograd_support.h"
#include "../ops.h"

namespace kiln::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// d relu_backward(g, y) / dg = 1[y > 0], applied again by relu_backward; its
// derivative in y is zero almost everywhere.
class ReluBackwardFunction : public torch::autograd::Function<ReluBackwardFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& grad, const at::Tensor& y) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({y});
    return kiln::ops::relu_backward(grad, y);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto y = ctx->get_saved_variables()[0];
    return {kiln::ops::relu_backward(grad_outputs[0], y), at::Tensor()};
  }
};

class ReluFunction : public torch::autograd::Function<ReluFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto y = kiln::ops::relu(x);
    ctx->save_for_backward({y});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto y = ctx->get_saved_variables()[0];
    return {kiln::ops::relu_backward(grad_outputs[0], y)};
  }
};

at::Tensor relu_autograd(const at::Tensor& x) {
  return record_or_call<ReluFunction>(&kiln::ops::relu, x);
}

at::Tensor relu_backward_autograd(const at::Tensor& grad, const at::Tensor& y) {
  return record_or_call<ReluBackwardFunction>(&kiln::ops::relu_backward, grad, y);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Autograd, m) {
  m.impl("relu", relu_autograd);
  m.impl("relu_backward", relu_backward_autograd);
}

KILN_AUTOCAST_KEEP_DTYPE("relu", kiln::ops::relu)

}  // namespace kiln::ops
