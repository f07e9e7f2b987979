// Autograd for kiln::cross_entropy: the op itself is CompositeImplicitAutograd —
// a torch::autograd::Function whose forward runs cross_entropy_forward below
// autograd and saves (logits, target, lse), and whose backward calls
// cross_entropy_backward — so one kernel serves every device, with or without grad.
#include <torch/autograd.h>
#include <torch/library.h>

#include "../ops.h"

namespace kiln::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class CrossEntropyFunction : public torch::autograd::Function<CrossEntropyFunction> {
 public:
  // logits: (B, C), target: (B) int64 → the mean loss, a scalar of logits' dtype.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& target) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [loss, lse] = kiln::ops::cross_entropy_forward(logits, target);
    ctx->save_for_backward({logits, target, lse});
    return loss;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    return {kiln::ops::cross_entropy_backward(grad_outputs[0], saved[0], saved[1], saved[2]),
            at::Tensor()};
  }
};

at::Tensor cross_entropy_composite(const at::Tensor& logits, const at::Tensor& target) {
  return CrossEntropyFunction::apply(logits, target);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CompositeImplicitAutograd, m) {
  m.impl("cross_entropy", cross_entropy_composite);
}

}  // namespace kiln::ops
