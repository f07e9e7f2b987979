// Autograd for kiln::max_pool2. The op is CompositeImplicitAutograd: a
// torch::autograd::Function whose forward runs max_pool2_forward below autograd and
// saves the windows' codes (a byte each) and x's size and layout, and whose backward
// calls max_pool2_backward. Its backward is not itself differentiable: a double
// backward through it is refused with a message. Autocast leaves it alone (it runs in
// x's dtype, as ATen's max_pool2d does).
#include <torch/autograd.h>
#include <torch/library.h>

#include "../ops.h"
#include "max_pool2_args.h"

namespace kiln::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class MaxPool2Function : public torch::autograd::Function<MaxPool2Function> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [y, code] = kiln::ops::max_pool2_forward(x);
    ctx->save_for_backward({code});
    ctx->saved_data["size"] = x.sizes().vec();
    ctx->saved_data["channels_last"] = max_pool2_channels_last(x);
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    TORCH_CHECK(!at::GradMode::is_enabled(),
                "kiln::max_pool2: its backward is not differentiable (create_graph=True); at::max_pool2d's is");
    const auto size = ctx->saved_data["size"].toIntVector();
    return {kiln::ops::max_pool2_backward(grad_outputs[0], ctx->get_saved_variables()[0], size,
                                          ctx->saved_data["channels_last"].toBool())};
  }
};

at::Tensor max_pool2_composite(const at::Tensor& x) {
  if (!x.requires_grad() || !at::GradMode::is_enabled()) {
    at::AutoDispatchBelowADInplaceOrView below;
    return std::get<0>(kiln::ops::max_pool2_forward(x));
  }
  return MaxPool2Function::apply(x);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CompositeImplicitAutograd, m) {
  m.impl("max_pool2", max_pool2_composite);
}

}  // namespace kiln::ops
