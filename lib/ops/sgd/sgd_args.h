// What the fused_sgd_ kernels share (CPU, CUDA and Meta): the checks of the lists
// and the scalars, and the spans the CPU and CUDA kernels update.
#pragma once
#include "../multi_tensor_args.h"
#include "sgd_kernel.h"

namespace kiln::ops {

constexpr const char* kFusedSGD = "kiln::fused_sgd_";

/// Throws unless momentum >= 0, and momentum_buffers is empty when momentum is 0;
/// then check_tensor_lists over params, grads (and momentum_buffers with momentum);
/// with `spans`, returns what the kernels update.
inline MultiTensorArgs fused_sgd_args(at::TensorList params, at::TensorList grads,
                                      at::TensorList momentum_buffers, double momentum,
                                      bool spans = true) {
  TORCH_CHECK(momentum >= 0, kFusedSGD, ": momentum: expected >= 0, got ", momentum);
  TORCH_CHECK(momentum != 0 || momentum_buffers.empty(), kFusedSGD,
              ": momentum_buffers: expected none with momentum 0, got ", momentum_buffers.size());
  const auto run = [&](std::initializer_list<TensorListArg> lists) {
    if (!spans) {
      check_tensor_lists(kFusedSGD, lists);
      return MultiTensorArgs{};
    }
    return multi_tensor_args(kFusedSGD, lists);
  };
  if (momentum == 0) return run({{"params", params, true}, {"grads", grads, false}});
  return run({{"params", params, true},
              {"grads", grads, false},
              {"momentum_buffers", momentum_buffers, true}});
}

}  // namespace kiln::ops
