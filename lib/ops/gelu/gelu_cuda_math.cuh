// The GELU maths of the CUDA kernels of gelu and bias_gelu: gelu_math.h's forms in
// the opmath type of the storage type T, with exp's argument capped at kExpCap.
//
// float and double results use the precise expf/exp and IEEE division. A half or
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

struct FastExp {
  __device__ float operator()(float v) const { return __expf(fminf(v, float(gelu_math::kExpCap))); }
};

struct FastDivide {
  __device__ float operator()(float a, float b) const { return __fdividef(a, b); }
};

/// Whether T's results take the approximate exp and division (half, bfloat16).
template <typename T>
constexpr bool kApproximate = sizeof(T) == 2;

/// gelu(x) in opmath_t<T>, for a result stored as T.
template <typename T>
__device__ __forceinline__ opmath_t<T> forward(opmath_t<T> x) {
  if constexpr (kApproximate<T>) return gelu_math::forward(x, FastExp{}, FastDivide{});
  else return gelu_math::forward(x, PreciseExp{});
}

/// gelu'(x) in opmath_t<T>, for a result stored as T.
template <typename T>
__device__ __forceinline__ opmath_t<T> derivative(opmath_t<T> x) {
  if constexpr (kApproximate<T>) return gelu_math::derivative(x, FastExp{}, FastDivide{});
  else return gelu_math::derivative(x, PreciseExp{});
}

}  // namespace kiln::ops::cuda::gelu_device
