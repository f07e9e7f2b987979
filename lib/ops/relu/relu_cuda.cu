// CUDA relu: the device maths and its launchers on raw pointers and a stream
// (the Tensor side lives in relu_cuda.cpp, so this file sees no ATen).
#include "../cuda_support.cuh"
#include "relu_kernel.h"

namespace kiln::ops::cuda {
namespace {

// max(x, 0) in opmath; NaN propagates (as at::relu does).
struct ReluForward {
  template <typename T>
  __device__ T operator()(T x) const {
    const opmath_t<T> v = static_cast<opmath_t<T>>(x);
    return (v > opmath_t<T>(0) || v != v) ? x : T(0.0f);
  }
};

// grad where the output was positive, else 0.
struct ReluBackward {
  template <typename T>
  __device__ T operator()(T grad, T y) const {
    return static_cast<opmath_t<T>>(y) > opmath_t<T>(0) ? grad : T(0.0f);
  }
};

}  // namespace

void relu_forward(DType dtype, const void* x, void* y, int64_t n, CUstream_st* stream) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    launch_map1(ReluForward{}, static_cast<const T*>(x), static_cast<T*>(y), n, stream);
  });
}

void relu_backward(DType dtype, const void* grad, const void* y, void* grad_x, int64_t n,
                   CUstream_st* stream) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    launch_map2(ReluBackward{}, static_cast<const T*>(grad), static_cast<const T*>(y),
                static_cast<T*>(grad_x), n, stream);
  });
}

}  // namespace kiln::ops::cuda
