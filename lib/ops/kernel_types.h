// The element types that kiln's raw-pointer kernels (CPU capability builds and
// CUDA) understand; kept free of torch headers so those files compile fast.
#pragma once
#include <cstdint>

namespace kiln::ops {

enum class DType : int8_t { kFloat, kDouble, kHalf, kBFloat16 };

/// Size in bytes of one element. Example: elem_size(DType::kHalf) == 2
constexpr int64_t elem_size(DType t) {
  return t == DType::kDouble ? 8 : t == DType::kFloat ? 4 : 2;
}

}  // namespace kiln::ops
