// Meta kernel of kiln::fused_lion_: an in-place update has no output to describe, so
// on meta tensors it runs the checks the CPU and CUDA kernels share (lion_args.h).
#include <torch/library.h>

#include "lion_args.h"

namespace kiln::ops {
namespace {

void fused_lion_meta(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                     double /*lr*/, double beta1, double beta2, double /*weight_decay*/) {
  fused_lion_args(params, grads, exp_avgs, beta1, beta2, /*spans=*/false);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Meta, m) { m.impl("fused_lion_", fused_lion_meta); }

}  // namespace kiln::ops
