// CUDA gelu: the shared maths (gelu_cuda_math.cuh) in opmath on raw pointers and a
// stream.
#include "../cuda_support.cuh"
#include "gelu_cuda_math.cuh"
#include "gelu_kernel.h"

namespace kiln::ops::cuda {
namespace {

struct GeluForward {
  template <typename T>
  __device__ T operator()(T x) const {
    return static_cast<T>(gelu_device::forward<T>(static_cast<opmath_t<T>>(x)));
  }
};

struct GeluBackward {
  template <typename T>
  __device__ T operator()(T grad, T x) const {
    using M = opmath_t<T>;
    return static_cast<T>(static_cast<M>(grad) * gelu_device::derivative<T>(static_cast<M>(x)));
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
