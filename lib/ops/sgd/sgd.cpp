// The Autograd entry of kiln::fused_sgd_ (optimizer_step_autograd: refused where
// autograd would record it; the kernel runs below autograd; version counters bumped).
#include <torch/library.h>

#include "../multi_tensor_args.h"
#include "../ops.h"

namespace kiln::ops {
namespace {

void fused_sgd_autograd(at::TensorList params, at::TensorList grads,
                        at::TensorList momentum_buffers, double lr, double momentum,
                        double dampening, double weight_decay, bool nesterov, bool first_step) {
  optimizer_step_autograd("kiln::fused_sgd_", params, {params, momentum_buffers}, [&] {
    kiln::ops::fused_sgd_(params, grads, momentum_buffers, lr, momentum, dampening, weight_decay,
                          nesterov, first_step);
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Autograd, m) { m.impl("fused_sgd_", fused_sgd_autograd); }

}  // namespace kiln::ops
