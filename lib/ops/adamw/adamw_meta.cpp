// Meta kernel of kiln::fused_adamw_: an in-place update has no output to describe,
// so on meta tensors it runs the checks the CPU and CUDA kernels share (list
// lengths, shapes, dtypes, devices, scalars; adamw_args.h) and nothing else.
#include <torch/library.h>

#include "adamw_args.h"

namespace kiln::ops {
namespace {

void fused_adamw_meta(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                      at::TensorList exp_avg_sqs, double /*lr*/, double beta1, double beta2,
                      double /*weight_decay*/, double /*eps*/, int64_t step) {
  fused_adamw_args(params, grads, exp_avgs, exp_avg_sqs, beta1, beta2, step, /*spans=*/false);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Meta, m) { m.impl("fused_adamw_", fused_adamw_meta); }

}  // namespace kiln::ops
