// The argument checks of kiln::cast, shared by its CPU, CUDA and Meta kernels.
#pragma once
#include "../op_support.h"

namespace kiln::ops {

/// Throws unless x is a floating tensor and dtype a floating dtype kiln's kernels know.
/// Example: check_cast(x, at::kBFloat16);
inline void check_cast(const at::Tensor& x, at::ScalarType dtype) {
  check_floating("kiln::cast", "x", x);
  TORCH_CHECK(is_kernel_dtype(dtype), "kiln::cast: dtype: expected float32, float64, float16 or bfloat16, got ", dtype);
}

}  // namespace kiln::ops
