// CUDA grad_norm: one multi-tensor launch over a table of chunks; each block
// reduces its chunks, the last block to finish reduces the blocks' partial sums
// (the threadfence reduction), so the norm is one scalar on the device and the
// host never waits.
#include "../cuda_support.cuh"
#include "grad_norm_kernel.h"

namespace kiln::ops::cuda {
namespace {

// Sum over the block into thread 0's return value; `shared` holds one per warp.
template <typename A>
__device__ A block_sum(A v, A* shared) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / 32 ? shared[threadIdx.x] : A(0);
  if (warp == 0)
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  __syncthreads();
  return v;
}

template <typename T>
__global__ void grad_norm_kernel(const int64_t* __restrict__ table, int64_t chunks,
                                 double* __restrict__ partials, unsigned* counter, void* out,
                                 bool out_double) {
  using A = opmath_t<T>;
  constexpr int kVec = 16 / sizeof(T);
  __shared__ double shared[kThreads / 32];
  __shared__ bool last;
  A acc = A(0);
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const T* p = reinterpret_cast<const T*>(table[2 * c]);
    const int64_t n = table[2 * c + 1];
    int64_t done = 0;
    if (reinterpret_cast<uintptr_t>(p) % 16 == 0) {  // 16-byte packs, then the tail
      const int64_t packs = n / kVec;
      for (int64_t i = threadIdx.x; i < packs; i += blockDim.x) {
        const Pack<T, kVec> v = reinterpret_cast<const Pack<T, kVec>*>(p)[i];
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          const A x = static_cast<A>(v.v[k]);
          acc += x * x;
        }
      }
      done = packs * kVec;
    }
    for (int64_t i = done + threadIdx.x; i < n; i += blockDim.x) {
      const A x = static_cast<A>(p[i]);
      acc += x * x;
    }
  }
  const double block = block_sum(static_cast<double>(acc), shared);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = block;
    __threadfence();  // the partial is visible before the ticket is taken
    last = atomicAdd(counter, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  double sum = 0;
  for (int b = threadIdx.x; b < gridDim.x; b += blockDim.x)
    sum += *static_cast<volatile double*>(partials + b);
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) {
    if (out_double) *static_cast<double*>(out) = sqrt(sum);
    else *static_cast<float*>(out) = static_cast<float>(sqrt(sum));
  }
}

}  // namespace

int grad_norm_blocks(int64_t chunks) { return grid_for(chunks * kThreads); }

void grad_norm(DType dtype, const int64_t* table, int64_t chunks, void* workspace, int blocks,
               void* out, bool out_double, CUstream_st* stream) {
  auto* partials = static_cast<double*>(workspace);
  auto* counter = reinterpret_cast<unsigned*>(partials + blocks);
  C10_CUDA_CHECK(cudaMemsetAsync(counter, 0, sizeof(unsigned), stream));
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    grad_norm_kernel<T><<<blocks, kThreads, 0, stream>>>(table, chunks, partials, counter, out,
                                                         out_double);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace kiln::ops::cuda
