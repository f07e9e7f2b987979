// Autograd for kiln::cross_entropy: the op itself is CompositeImplicitAutograd —
// a torch::autograd::Function whose forward runs cross_entropy_forward below
// autograd and saves (logits, target, lse), and whose backward calls
// cross_entropy_backward — so one kernel serves every device, with or without grad.
// Under autocast it runs in float32, as ATen's cross-entropy does.
#include <torch/autograd.h>
#include <torch/library.h>

#include "../autocast.h"
#include "../autograd_support.h"
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
  if (!records(logits)) {  // evaluation, or logits without grad: no graph node to build
    at::AutoDispatchBelowADInplaceOrView below;
    return std::get<0>(kiln::ops::cross_entropy_forward(logits, target));
  }
  return CrossEntropyFunction::apply(logits, target);
}

// Autocast policy "float32" (ATen's for its losses): lower-precision logits are
// cast to float32 and the loss comes back in float32. A float16 loss breaks fp16
// training: GradScaler multiplies the loss by 2^16, and the gradient flowing back
// into a float16 loss is that scale, 65536, past float16's largest value (65504) —
// every first step (and every step after the scale grows) would see inf and be
// skipped. float32 also keeps the log-sum-exp's digits.
template <c10::DeviceType D>
at::Tensor cross_entropy_autocast(const at::Tensor& logits, const at::Tensor& target) {
  autocast::Below<D> below;
  return kiln::ops::cross_entropy(autocast::cast<D>(logits, at::kFloat), target);
}
template <c10::DeviceType D>
std::tuple<at::Tensor, at::Tensor> cross_entropy_forward_autocast(const at::Tensor& logits,
                                                                  const at::Tensor& target) {
  autocast::Below<D> below;
  return kiln::ops::cross_entropy_forward(autocast::cast<D>(logits, at::kFloat), target);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CompositeImplicitAutograd, m) {
  m.impl("cross_entropy", cross_entropy_composite);
}

KILN_AUTOCAST_KERNELS("cross_entropy", cross_entropy_autocast)
KILN_AUTOCAST_KERNELS("cross_entropy_forward", cross_entropy_forward_autocast)

}  // namespace kiln::ops
