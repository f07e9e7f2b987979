// CUDA gelu: the shared maths (gelu_math.h) in opmath on raw pointers and a stream.
#include "../cuda_support.cuh"
#include "gelu_kernel.h"
#include "gelu_math.h"

namespace kiln::ops::cuda {
namespace {

// exp with its argument capped (gelu_math::kExpCap); NaN stays NaN through x.
struct Exp {
  __device__ float operator()(float v) const { return expf(fminf(v, float(gelu_math::kExpCap))); }
  __device__ double operator()(double v) const { return exp(fmin(v, gelu_math::kExpCap)); }
};

struct GeluForward {
  template <typename T>
  __device__ T operator()(T x) const {
    return static_cast<T>(gelu_math::forward(static_cast<opmath_t<T>>(x), Exp{}));
  }
};

struct GeluBackward {
  template <typename T>
  __device__ T operator()(T grad, T x) const {
    using M = opmath_t<T>;
    return static_cast<T>(static_cast<M>(grad) * gelu_math::derivative(static_cast<M>(x), Exp{}));
  }
};

}  // namespace

void gelu_forward(DType dtype, const void* x, void* y, int64_t n, CUstream_st* stream) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    launch_map1(GeluForward{}, static_cast<const T*>(x), static_cast<T*>(y), n, stream);
  });
}

void gelu_backward(DType dtype, const void* grad, const void* x, void* grad_x, int64_t n,
                   CUstream_st* stream) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    launch_map2(GeluBackward{}, static_cast<const T*>(grad), static_cast<const T*>(x),
                static_cast<T*>(grad_x), n, stream);
  });
}

}  // namespace kiln::ops::cuda
