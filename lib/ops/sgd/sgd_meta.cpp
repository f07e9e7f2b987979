// Meta kernel of kiln::fused_sgd_: an in-place update has no output to describe, so on
// meta tensors it runs the checks the CPU and CUDA kernels share (sgd_args.h).
#include <torch/library.h>

#include "sgd_args.h"

namespace kiln::ops {
namespace {

void fused_sgd_meta(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers,
                    double /*lr*/, double momentum, double /*dampening*/, double /*weight_decay*/,
                    bool /*nesterov*/, bool /*first_step*/) {
  fused_sgd_args(params, grads, momentum_buffers, momentum, /*spans=*/false);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Meta, m) { m.impl("fused_sgd_", fused_sgd_meta); }

}  // namespace kiln::ops
