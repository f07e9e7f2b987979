// The GELU maths of the CUDA kernels of gelu and bias_gelu: gelu_math.h's forms in
// the opmath type of the storage type T, with exp's argument capped at kExpCap.
//
// float and double results use the precise expf/exp; double IEEE division, float a
// refined reciprocal (RefinedDivide: no slow path to call). A half or
// bfloat16 result keeps only 11 or 8 significant bits, so there the special function
// unit's approximations serve: __expf (2 + floor(1.173·|v|) ulp of float, under 6e-6
// relative for |v| ≤ 80) and __fdividef (2 ulp for divisors below 2^126; ours are at
// most 1 + e^80 ≈ 5.5e34). The precise forms cost about 36 instructions an element
// (sm_90 SASS of the bfloat16 forward: 12 FFMA, an FCHK and a call to the division's
// slow path per element), which with 4 bytes an element to move made bfloat16 gelu
// compute-bound on the H200: 0.75-0.83x ATen (2026-12-04).
#pragma once
#include "../cuda_support.cuh"
#include "gelu_math.h"

namespace kiln::ops::cuda::gelu_device {

struct PreciseExp {
  __device__ float operator()(float v) const { return expf(fminf(v, float(gelu_math::kExpCap))); }
  __device__ double operator()(double v) const { return exp(fmin(v, gelu_math::kExpCap)); }
};

// 2^(v·log2 e) from the special function unit, flushing results below 2^-126 to 0
// (__expf's rescaling for a subnormal result costs a compare and two predicated
// multiplies an element). Here a flushed e = e^v < 1.2e-38 only meets 1 + e, or
// e·s beside s ≈ 1, and a half or bfloat16 result keeps no subnormal of float's range
// either.
struct FastExp {
  __device__ float operator()(float v) const {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(fminf(v, float(gelu_math::kExpCap)) * 1.4426950408889634f));
    return r;
  }
};

struct FastDivide {
  __device__ float operator()(float a, float b) const { return __fdividef(a, b); }
};

/// a / b for float results as a·(1/b), the reciprocal from the special function unit
/// (rcp.approx, within 1 ulp) refined by one Newton step (within about 1 ulp after
/// it), so the quotient stays within about 2 ulp (2.4e-7 relative) where IEEE
/// division rounds once. The divisors here are 1 + e^v with v ≤ kExpCap, so 1 ≤ b ≤
/// 5.5e34 (or NaN): 1/b is a normal float and neither step meets an ∞ or a subnormal;
/// a = ±∞ or NaN carries through as it does in a / b. IEEE division checks its range
/// (FCHK) and calls a slow path per element: in the sm_90 SASS of the float32 forward
/// map that was 13 calls, the pointers spilt to local memory around them, and 0.89x
/// ATen at 2^24-2^26 on the H200 (2026-12-04).
struct RefinedDivide {
  __device__ float operator()(float a, float b) const {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b));
    r = fmaf(r, fmaf(-b, r, 1.0f), r);
    return a * r;
  }
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
