// Autograd for kiln::batch_norm. The op is CompositeImplicitAutograd: a
// torch::autograd::Function whose forward runs batch_norm_forward below autograd (which
// updates the running statistics in training) and saves (x, weight, bias, mean,
// invstd), and whose backward calls batch_norm_backward for the inputs that need a
// gradient. Its backward is not itself differentiable: a double backward through it is
// refused with a message. Autocast leaves it alone (no kernel of its own), as it leaves
// ATen's batch norm: a bfloat16 x runs in bfloat16 with float32 parameters.
#include <torch/autograd.h>
#include <torch/library.h>

#include "../ops.h"

namespace kiln::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class BatchNormFunction : public torch::autograd::Function<BatchNormFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, at::Tensor running_mean, at::Tensor running_var, bool training,
                            double momentum, double eps, bool relu) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [y, mean, invstd] =
        kiln::ops::batch_norm_forward(x, weight, bias, running_mean, running_var, training, momentum, eps, relu);
    ctx->save_for_backward({x, weight, bias, mean, invstd});
    ctx->saved_data["training"] = training;
    ctx->saved_data["relu"] = relu;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    TORCH_CHECK(!at::GradMode::is_enabled(),
                "kiln::batch_norm: its backward is not differentiable (create_graph=True); at::batch_norm's is");
    const auto s = ctx->get_saved_variables();
    const std::array<bool, 3> mask = {ctx->needs_input_grad(0), ctx->needs_input_grad(1), ctx->needs_input_grad(2)};
    auto [dx, dw, db] = kiln::ops::batch_norm_backward(grad_outputs[0], s[0], s[1], s[2], s[3], s[4],
                                                       ctx->saved_data["training"].toBool(),
                                                       ctx->saved_data["relu"].toBool(), mask);
    return {dx, dw, db, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor batch_norm_composite(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                at::Tensor& running_mean, at::Tensor& running_var, bool training, double momentum,
                                double eps, bool relu) {
  const bool grad = at::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad() || bias.requires_grad());
  if (!grad) {
    at::AutoDispatchBelowADInplaceOrView below;
    return std::get<0>(
        kiln::ops::batch_norm_forward(x, weight, bias, running_mean, running_var, training, momentum, eps, relu));
  }
  return BatchNormFunction::apply(x, weight, bias, running_mean, running_var, training, momentum, eps, relu);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CompositeImplicitAutograd, m) {
  m.impl("batch_norm", batch_norm_composite);
}

}  // namespace kiln::ops
