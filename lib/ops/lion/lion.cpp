// The Autograd entry of kiln::fused_lion_ (optimizer_step_autograd: refused where
// autograd would record it; the kernel runs below autograd; version counters bumped).
#include <torch/library.h>

#include "../multi_tensor_args.h"
#include "../ops.h"

namespace kiln::ops {
namespace {

void fused_lion_autograd(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                         double lr, double beta1, double beta2, double weight_decay) {
  optimizer_step_autograd("kiln::fused_lion_", params, {params, exp_avgs}, [&] {
    kiln::ops::fused_lion_(params, grads, exp_avgs, lr, beta1, beta2, weight_decay);
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Autograd, m) { m.impl("fused_lion_", fused_lion_autograd); }

}  // namespace kiln::ops
