// What the fused_adamw_ kernels share (CPU, CUDA and Meta): the checks of the four
// lists and the scalars, and the spans the CPU and CUDA kernels update.
#pragma once
#include "../multi_tensor_args.h"
#include "adamw_kernel.h"

namespace kiln::ops {

constexpr const char* kFusedAdamW = "kiln::fused_adamw_";

/// Throws unless step >= 1 and the betas lie in [0, 1), then check_tensor_lists over
/// params, grads, exp_avgs, exp_avg_sqs; with `spans`, returns what the kernels update.
inline MultiTensorArgs fused_adamw_args(at::TensorList params, at::TensorList grads,
                                        at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                                        double beta1, double beta2, int64_t step, bool spans = true) {
  TORCH_CHECK(step >= 1, kFusedAdamW,
              ": step: expected >= 1 (the step count including this update), got ", step);
  TORCH_CHECK(beta1 >= 0 && beta1 < 1, kFusedAdamW, ": beta1: expected in [0, 1), got ", beta1);
  TORCH_CHECK(beta2 >= 0 && beta2 < 1, kFusedAdamW, ": beta2: expected in [0, 1), got ", beta2);
  const std::initializer_list<TensorListArg> lists{{"params", params, true},
                                                   {"grads", grads, false},
                                                   {"exp_avgs", exp_avgs, true},
                                                   {"exp_avg_sqs", exp_avg_sqs, true}};
  if (!spans) {
    check_tensor_lists(kFusedAdamW, lists);
    return {};
  }
  return multi_tensor_args(kFusedAdamW, lists);
}

}  // namespace kiln::ops
