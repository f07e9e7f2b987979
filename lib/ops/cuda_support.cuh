// What kiln's .cu files share, without including ATen: the float "opmath" type
// for half and bfloat16, dtype dispatch to CUDA types, and grid-stride launchers
// for elementwise maps that use 16-byte loads when the buffers allow it.
#pragma once
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

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

// Packs of 16 bytes each thread keeps in flight: it loads kUnroll packs a grid
// stride apart (from every input) before it uses the first. The estimate behind it,
// not yet a measurement: an H200 SM's share of 4.8 TB/s is 36 GB/s, and over about a
// microsecond of HBM latency that asks for some 36 KiB in flight, where one pack a
// thread at full occupancy (2,048 threads) is 32 KiB. kiln_bench_ops --device cuda
// measures the result against a device copy and ATen's kernels.
constexpr int kUnroll = 4;

// op applied to element k of the u-th packs of every input.
template <typename Op, typename P, size_t... I>
__device__ __forceinline__ auto apply_at(const Op& op, const P (&v)[sizeof...(I)][kUnroll], int u, int k,
                                         std::index_sequence<I...>) {
  return op(v[I][u].v[k]...);
}

// out[i] = op(in[i]...) over n elements: packs of kVec elements (kUnroll a trip while
// a whole trip fits, then one a trip), then a scalar tail. Every pointer is 16-byte
// aligned when kVec > 1 (the launchers check).
template <int kVec, typename T, typename Op, typename... In>
__global__ void map_kernel(Op op, int64_t n, T* __restrict__ out, const In* __restrict__... in) {
  using P = Pack<T, kVec>;
  constexpr int kIn = sizeof...(In);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t n_vec = n / kVec;
  const auto step = [&](int64_t i, int packs) {  // packs (kUnroll or 1) from i, a stride apart
    P v[kIn][kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (u >= packs) break;
      int j = 0;  // the comma fold runs left to right: input j into v[j]
      ((v[j++][u] = reinterpret_cast<const P*>(in)[i + u * stride]), ...);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (u >= packs) break;
      P o;
#pragma unroll
      for (int k = 0; k < kVec; ++k) o.v[k] = apply_at(op, v, u, k, std::make_index_sequence<kIn>{});
      reinterpret_cast<P*>(out)[i + u * stride] = o;
    }
  };
  int64_t i = first;
  for (; i + (kUnroll - 1) * stride < n_vec; i += kUnroll * stride) step(i, kUnroll);
  for (; i < n_vec; i += stride) step(i, 1);
  for (int64_t e = n_vec * kVec + first; e < n; e += stride) out[e] = op(in[e]...);
}

/// Launches out = op(a) on `stream`, vectorised when every pointer is 16-byte aligned.
template <typename T, typename Op>
void launch_map1(Op op, const T* a, T* out, int64_t n, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  if (aligned16(a) && aligned16(out)) {
    map_kernel<kVec><<<grid_for(n / kVec + 1), kThreads, 0, stream>>>(op, n, out, a);
  } else {
    map_kernel<1><<<grid_for(n), kThreads, 0, stream>>>(op, n, out, a);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

/// Launches out = op(a, b) on `stream`, vectorised when every pointer is aligned.
template <typename T, typename Op>
void launch_map2(Op op, const T* a, const T* b, T* out, int64_t n, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  if (aligned16(a) && aligned16(b) && aligned16(out)) {
    map_kernel<kVec><<<grid_for(n / kVec + 1), kThreads, 0, stream>>>(op, n, out, a, b);
  } else {
    map_kernel<1><<<grid_for(n), kThreads, 0, stream>>>(op, n, out, a, b);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace kiln::ops::cuda
