// The GELU maths of the CUDA kernels of gelu and bias_gelu: gelu_math.h's forms in
// the opmath type of the storage type T, with exp's argument capped at kExpCap.
//
// float and double results use the precise expf/exp; double IEEE division, float a
// refined reciprocal (RefinedDivide: no slow path to call). A half or bfloat16 result
// keeps only 11 or 8 significant bits, so there the special function unit's
// approximations serve (cuda_fast_math.cuh): its exp (2 + floor(1.173·|v|) ulp of
// float, under 6e-6 relative for |v| ≤ 80) and reciprocal (1 ulp; the divisors are at
// most 1 + e^80 ≈ 5.5e34). The precise forms cost about 36 instructions an element
// (sm_90 SASS of the bfloat16 forward: 12 FFMA, an FCHK and a call to the division's
// slow path per element), which with 4 bytes an element to move made bfloat16 gelu
// compute-bound on the H200: 0.75-0.83x ATen (2026-12-04).
#pragma once
#include "../cuda_fast_math.cuh"
#include "../cuda_support.cuh"
#include "gelu_math.h"

namespace kiln::ops::cuda::gelu_device {

struct PreciseExp {
  __device__ float operator()(float v) const { return expf(fminf(v, float(gelu_math::kExpCap))); }
  __device__ double operator()(double v) const { return exp(fmin(v, gelu_math::kExpCap)); }
};

// e^v capped at kExpCap, from the special function unit (fast::exp_ftz: __expf's
// rescaling for a subnormal result costs a compare and two predicated multiplies an
// element). Here a flushed e = e^v < 1.2e-38 only meets 1 + e, or e·s beside s ≈ 1,
// and a half or bfloat16 result keeps no subnormal of float's range either.
struct FastExp {
  __device__ float operator()(float v) const { return fast::exp_ftz(fminf(v, float(gelu_math::kExpCap))); }
};

struct FastDivide {
  __device__ float operator()(float a, float b) const { return a * fast::rcp(b); }
};

/// a / b for float results as a·(1/b), the reciprocal refined by one Newton step
/// (fast::rcp_refined), so the quotient stays within about 2 ulp (2.4e-7 relative)
/// where IEEE division rounds once. The divisors here are 1 + e^v with v ≤ kExpCap, so
/// 1 ≤ b ≤ 5.5e34 (or NaN): 1/b is a normal float and neither step meets an ∞ or a
/// subnormal; a = ±∞ or NaN carries through as it does in a / b. IEEE division checks
/// its range (FCHK) and calls a slow path per element: in the sm_90 SASS of the float32
/// forward map that was 13 calls, the pointers spilt to local memory around them, and
/// 0.89x ATen at 2^24-2^26 on the H200 (2026-12-04).
struct RefinedDivide {
  __device__ float operator()(float a, float b) const { return a * fast::rcp_refined(b); }
  __device__ double operator()(double a, double b) const { return a / b; }
};

/// Whether T's results take the approximate exp and division (half, bfloat16).
template <typename T>
constexpr bool kApproximate = sizeof(T) == 2;

/// gelu(x) in opmath_t<T>, for a result stored as T.
template <typename T>
__device__ __forceinline__ opmath_t<T> forward(opmath_t<T> x) {
  if constexpr (kApproximate<T>) return gelu_math::forward(x, FastExp{}, FastDivide{});
  else return gelu_math::forward(x, PreciseExp{}, RefinedDivide{});
}

/// gelu'(x) in opmath_t<T>, for a result stored as T.
template <typename T>
__device__ __forceinline__ opmath_t<T> derivative(opmath_t<T> x) {
  if constexpr (kApproximate<T>) return gelu_math::derivative(x, FastExp{}, FastDivide{});
  else return gelu_math::derivative(x, PreciseExp{}, RefinedDivide{});
}

}  // namespace kiln::ops::cuda::gelu_device
