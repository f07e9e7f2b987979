// The fused optimizer steps (adamw, lion, sgd) update lists of tensors together:
// params, grads and their state, tensor i of every list of one shape. A TensorSpan is
// tensor i of every list as raw pointers, the unit the CPU capability builds and the
// CUDA multi-tensor launcher work on; free of torch headers so those compile fast.
#pragma once
#include <cstdint>

namespace kiln::ops {

/// Lists one fused step may take (AdamW: param, grad, exp_avg, exp_avg_sq).
constexpr int kMaxTensorLists = 4;

/// One tensor of each list: data[k] is list k's (list 1, the gradient, is only read),
/// n elements each, all in one dense layout and one dtype.
struct TensorSpan {
  void* data[kMaxTensorLists];
  int64_t n;
};

}  // namespace kiln::ops
