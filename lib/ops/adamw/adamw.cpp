// The Autograd entry of kiln::fused_adamw_: an optimizer step is not
// differentiable, so it refuses to run where autograd would record it, runs the
// device kernel below autograd and bumps the version counters of the tensors it
// updated in place (as ATen's in-place ops do, so autograd notices a stale save).
#include <ATen/core/grad_mode.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <torch/library.h>

#include "../ops.h"

namespace kiln::ops {
namespace {

void fused_adamw_autograd(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                          at::TensorList exp_avg_sqs, double lr, double beta1, double beta2,
                          double weight_decay, double eps, int64_t step) {
  if (at::GradMode::is_enabled())
    for (size_t i = 0; i < params.size(); ++i)
      TORCH_CHECK(!params[i].defined() || !params[i].requires_grad(),
                  "kiln::fused_adamw_: params[", i,
                  "] requires grad and grad mode is on; an optimizer step is not differentiable, "
                  "run it under torch::NoGradGuard");
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    kiln::ops::fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, lr, beta1, beta2, weight_decay,
                            eps, step);
  }
  for (const auto list : {params, exp_avgs, exp_avg_sqs})
    for (const auto& t : list) t.unsafeGetTensorImpl()->bump_version();
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Autograd, m) { m.impl("fused_adamw_", fused_adamw_autograd); }

}  // namespace kiln::ops
