// What the fused_lion_ kernels share (CPU, CUDA and Meta): the checks of the three
// lists and the scalars, and the spans the CPU and CUDA kernels update.
#pragma once
#include "../multi_tensor_args.h"
#include "lion_kernel.h"

namespace kiln::ops {

constexpr const char* kFusedLion = "kiln::fused_lion_";

/// Throws unless beta1 lies in [0, 1] and beta2 in [0, 1), then check_tensor_lists over
/// params, grads, exp_avgs; with `spans`, returns what the kernels update.
inline MultiTensorArgs fused_lion_args(at::TensorList params, at::TensorList grads,
                                       at::TensorList exp_avgs, double beta1, double beta2,
                                       bool spans = true) {
  TORCH_CHECK(beta1 >= 0 && beta1 <= 1, kFusedLion, ": beta1: expected in [0, 1], got ", beta1);
  TORCH_CHECK(beta2 >= 0 && beta2 < 1, kFusedLion, ": beta2: expected in [0, 1), got ", beta2);
  const std::initializer_list<TensorListArg> lists{
      {"params", params, true}, {"grads", grads, false}, {"exp_avgs", exp_avgs, true}};
  if (!spans) {
    check_tensor_lists(kFusedLion, lists);
    return {};
  }
  return multi_tensor_args(kFusedLion, lists);
}

}  // namespace kiln::ops
