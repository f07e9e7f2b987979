// What kiln's .cu files share, without including ATen: the float "opmath" type
// for half and bfloat16, dtype dispatch to CUDA types, and grid-stride launchers
// for elementwise maps that use 16-byte loads when the buffers allow it.
#pragma once
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernel_types.h"

namespace kiln::ops::cuda {

template <typename T> struct OpMath { using type = T; };
template <> struct OpMath<__half> { using type = float; };
template <> struct OpMath<__nv_bfloat16> { using type = float; };
/// The type arithmetic happens in: float for half and bfloat16, else T itself.
template <typename T> using opmath_t = typename OpMath<T>::type;

/// Calls f(T{}) with T the CUDA type of `dtype`.
template <typename F>
void by_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat: return f(float{});
    case DType::kDouble: return f(double{});
    case DType::kHalf: return f(__half{});
    case DType::kBFloat16: return f(__nv_bfloat16{});
  }
}

template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
  T v[kVec];
};

constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over `items`: enough to fill the device, no more.
inline int grid_for(int64_t items) {
  static int max_blocks = [] {
    int device = 0, sms = 0;
    C10_CUDA_CHECK(cudaGetDevice(&device));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms * 16;
  }();
  const int64_t want = (items + kThreads - 1) / kThreads;
  return static_cast<int>(want < max_blocks ? (want > 0 ? want : 1) : max_blocks);
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// out[i] = op(a[i]): packs of kVec elements, then a scalar tail.
template <int kVec, typename T, typename Op>
__global__ void map1_kernel(Op op, const T* __restrict__ a, T* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t n_vec = n / kVec;
  for (int64_t i = first; i < n_vec; i += stride) {
    Pack<T, kVec> pa = reinterpret_cast<const Pack<T, kVec>*>(a)[i];
#pragma unroll
    for (int k = 0; k < kVec; ++k) pa.v[k] = op(pa.v[k]);
    reinterpret_cast<Pack<T, kVec>*>(out)[i] = pa;
  }
  for (int64_t i = n_vec * kVec + first; i < n; i += stride) out[i] = op(a[i]);
}

// out[i] = op(a[i], b[i])
template <int kVec, typename T, typename Op>
__global__ void map2_kernel(Op op, const T* __restrict__ a, const T* __restrict__ b,
                            T* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t n_vec = n / kVec;
  for (int64_t i = first; i < n_vec; i += stride) {
    Pack<T, kVec> pa = reinterpret_cast<const Pack<T, kVec>*>(a)[i];
    const Pack<T, kVec> pb = reinterpret_cast<const Pack<T, kVec>*>(b)[i];
#pragma unroll
    for (int k = 0; k < kVec; ++k) pa.v[k] = op(pa.v[k], pb.v[k]);
    reinterpret_cast<Pack<T, kVec>*>(out)[i] = pa;
  }
  for (int64_t i = n_vec * kVec + first; i < n; i += stride) out[i] = op(a[i], b[i]);
}

/// Launches out = op(a) on `stream`, vectorised when every pointer is 16-byte aligned.
template <typename T, typename Op>
void launch_map1(Op op, const T* a, T* out, int64_t n, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  if (aligned16(a) && aligned16(out)) {
    map1_kernel<kVec><<<grid_for(n / kVec + 1), kThreads, 0, stream>>>(op, a, out, n);
  } else {
    map1_kernel<1><<<grid_for(n), kThreads, 0, stream>>>(op, a, out, n);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

/// Launches out = op(a, b) on `stream`, vectorised when every pointer is aligned.
template <typename T, typename Op>
void launch_map2(Op op, const T* a, const T* b, T* out, int64_t n, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  if (aligned16(a) && aligned16(b) && aligned16(out)) {
    map2_kernel<kVec><<<grid_for(n / kVec + 1), kThreads, 0, stream>>>(op, a, b, out, n);
  } else {
    map2_kernel<1><<<grid_for(n), kThreads, 0, stream>>>(op, a, b, out, n);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace kiln::ops::cuda
