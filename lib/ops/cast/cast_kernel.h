// Raw-pointer entry point of the CPU cast kernels, shared by the CPU capability builds
// and the Tensor-level code in cast_cpu.cpp.
#pragma once
#include <cstdint>

#include "../cpu_capability.h"
#include "../kernel_types.h"

namespace kiln::ops::cpu {
// y[i] = x[i] converted from `from` to `to`, one of them float32 and the other
// bfloat16 or float16 (cast_supported()); rounding to nearest even, NaN stays NaN and
// bfloat16's subnormals are kept as ATen's cast keeps them. native_bf16: float32 →
// bfloat16 through AVX512-BF16's vcvtne2ps2bf16 (only in the AVX-512 build).
KILN_DECLARE_CPU_KERNEL(cast_values, (DType from, const void* x, DType to, void* y, int64_t n,
                                      Stores stores, bool native_bf16))

/// Whether cast_values converts `from` to `to`. Example: cast_supported(DType::kFloat, DType::kBFloat16)
constexpr bool cast_supported(DType from, DType to) {
  const auto half = [](DType t) { return t == DType::kHalf || t == DType::kBFloat16; };
  return (from == DType::kFloat && half(to)) || (half(from) && to == DType::kFloat);
}
}  // namespace kiln::ops::cpu
