// The special function unit's approximate float maths, for kernels whose results keep
// fewer bits than float (half, bfloat16) or that refine them (one Newton step).
// CUDA's precise expf and IEEE division check their operands and carry slow paths:
// in sm_90 SASS an IEEE division is an FCHK and a call per element, and __expf
// rescales for a subnormal result (a compare and two predicated multiplies).
#pragma once
#include <cuda_runtime.h>

namespace kiln::ops::cuda::fast {

/// e^v from the special function unit (ex2.approx.ftz of v·log2 e): within
/// 2 + 1.173·|v| ulp of float, results below 2^-126 flushed to 0.
__device__ __forceinline__ float exp_ftz(float v) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v * 1.4426950408889634f));
  return r;
}

/// 1/b within 1 ulp (rcp.approx.ftz), for a normal b whose reciprocal is normal.
__device__ __forceinline__ float rcp(float b) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b));
  return r;
}

/// 1/b refined by one Newton step from rcp(b): within about 1 ulp; a/b as a·rcp_refined(b)
/// within about 1.5 (for 1 ≤ b ≤ 5.5e34, 4 M points emulated in numpy: 1.45).
__device__ __forceinline__ float rcp_refined(float b) {
  const float r = rcp(b);
  return fmaf(r, fmaf(-b, r, 1.0f), r);
}

}  // namespace kiln::ops::cuda::fast
