// CUDA sigmoid: the device maths and its launchers on raw pointers and a stream
// (the Tensor side lives in sigmoid_cuda.cpp, so this file sees no ATen).
#include "../cuda_fast_math.cuh"
#include "../cuda_support.cuh"
#include "sigmoid_kernel.h"

namespace kiln::ops::cuda {
namespace {

__device__ inline float exp_of(float v) { return expf(v); }
__device__ inline double exp_of(double v) { return ::exp(v); }

// Stable sigmoid of z = beta·x in opmath: e = exp(−|z|) ≤ 1 never overflows;
// s = 1/(1+e) for z ≥ 0 and e/(1+e) for z < 0. float and double take the precise exp
// and IEEE division. A half or bfloat16 result keeps 11 or 8 significant bits, so
// there the special function unit's exp and reciprocal serve (cuda_fast_math.cuh:
// within 1.2e-5 relative over the whole range, far below half a unit of either
// dtype); e below 2^-126 (z < −87.3) flushes to 0, where s is under 1.2e-38. The
// precise forms' slow-path calls left the bfloat16 forward at 0.86 of a device copy
// on the H200 at 2^26 (2026-12-04, float32 at 0.99).
template <typename T>
struct SigmoidForward {
  opmath_t<T> beta;
  __device__ T operator()(T x) const {
    using A = opmath_t<T>;
    const A z = beta * static_cast<A>(x);
    const A minus_abs = -(z < A(0) ? -z : z);
    if constexpr (sizeof(T) == 2) {
      const float e = fast::exp_ftz(minus_abs);
      return static_cast<T>((z < 0.0f ? e : 1.0f) * fast::rcp(1.0f + e));
    } else {
      const A e = exp_of(minus_abs);
      return static_cast<T>((z < A(0) ? e : A(1)) / (A(1) + e));
    }
  }
};

// clamp(beta·s·(1−s), −clip, clip)·grad in opmath; clip = +inf when there is none.
template <typename T>
struct SigmoidBackward {
  opmath_t<T> beta, clip;
  __device__ T operator()(T grad, T s) const {
    using A = opmath_t<T>;
    const A sv = static_cast<A>(s);
    A local = beta * sv * (A(1) - sv);
    local = local > clip ? clip : (local < -clip ? -clip : local);
    return static_cast<T>(local * static_cast<A>(grad));
  }
};

}  // namespace

void sigmoid_forward(DType dtype, const void* x, void* s, int64_t n, double beta,
                     CUstream_st* stream) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    launch_map1(SigmoidForward<T>{static_cast<opmath_t<T>>(beta)}, static_cast<const T*>(x),
                static_cast<T*>(s), n, stream);
  });
}

void sigmoid_backward(DType dtype, const void* grad, const void* s, void* grad_x, int64_t n,
                      double beta, double clip, CUstream_st* stream) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    using A = opmath_t<T>;
    launch_map2(SigmoidBackward<T>{static_cast<A>(beta), static_cast<A>(clip)},
                static_cast<const T*>(grad), static_cast<const T*>(s), static_cast<T*>(grad_x), n,
                stream);
  });
}

}  // namespace kiln::ops::cuda
