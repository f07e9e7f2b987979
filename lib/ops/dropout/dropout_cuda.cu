// CUDA dropout: the device side of philox.h's layout on raw pointers and a stream
// (the Tensor side lives in dropout_cuda.cpp, so this file sees no ATen). A thread
// takes one counter: its four words decide four elements 16 apart, so the 16 threads
// of a block of 64 elements store 16 neighbours at a time.
#include "../cuda_support.cuh"
#include "dropout_kernel.h"
#include "philox.h"

namespace kiln::ops::cuda {
namespace {

template <typename T>
__global__ void dropout_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, int64_t counters,
                               uint64_t seed, uint32_t keep_below, opmath_t<T> scale) {
  using A = opmath_t<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < counters; c += stride) {
    const philox::Words w = philox::words(seed, static_cast<uint64_t>(c));
    const int64_t first = c / philox::kLanes * philox::kBlock + c % philox::kLanes;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t e = first + k * philox::kLanes;
      if (e < n) y[e] = static_cast<T>(static_cast<A>(x[e]) * (w.v[k] < keep_below ? scale : A(0)));
    }
  }
}

}  // namespace

void dropout(DType dtype, const void* x, void* y, int64_t n, uint64_t seed, uint32_t keep_below,
             double scale, CUstream_st* stream) {
  // Every counter of every (possibly partial) block of 64, so no element is left out.
  const int64_t counters = (n + philox::kBlock - 1) / philox::kBlock * philox::kLanes;
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    dropout_kernel<T><<<grid_for(counters), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), n, counters, seed, keep_below,
        static_cast<opmath_t<T>>(scale));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace kiln::ops::cuda
