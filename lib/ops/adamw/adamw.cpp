// The Autograd entry of kiln::fused_adamw_ (optimizer_step_autograd: refused where
// autograd would record it; the kernel runs below autograd; version counters bumped).
#include <torch/library.h>

#include "../multi_tensor_args.h"
#include "../ops.h"

namespace kiln::ops {
namespace {

void fused_adamw_autograd(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                          at::TensorList exp_avg_sqs, double lr, double beta1, double beta2,
                          double weight_decay, double eps, int64_t step) {
  optimizer_step_autograd("kiln::fused_adamw_", params, {params, exp_avgs, exp_avg_sqs}, [&] {
    kiln::ops::fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, lr, beta1, beta2, weight_decay,
                            eps, step);
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Autograd, m) { m.impl("fused_adamw_", fused_adamw_autograd); }

}  // namespace kiln::ops
