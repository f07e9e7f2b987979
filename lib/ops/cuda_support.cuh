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

// Packs of 16 bytes each thread takes: a block covers one tile of kThreads × kUnroll
// consecutive packs (thread t the packs t, t + kThreads, …, so each warp's loads are
// contiguous), loading all of them from every input before it uses the first, and the
// grid has a block per tile, as ATen's vectorised kernels are laid out. The first
// lease (2026-12-04, H200) measured the grid-stride form before it, four packs a
// grid stride apart in a grid capped at 16 blocks an SM: 0.92-0.97 of ATen's speed at
// 2^24-2^26 floats (0.90-0.97 of a device copy, ATen 0.98-1.02).
constexpr int kUnroll = 4;

// op applied to element k of the u-th packs of every input.
template <typename Op, typename P, size_t... I>
__device__ __forceinline__ auto apply_at(const Op& op, const P (&v)[sizeof...(I)][kUnroll], int u, int k,
                                         std::index_sequence<I...>) {
  return op(v[I][u].v[k]...);
}

// out[i] = op(in[i]...) over n elements: this block's tile of packs of kVec elements
// (those past n / kVec skipped), and block 0 the scalar tail. Every pointer is 16-byte
// aligned when kVec > 1 (the launchers check). Launch map_blocks(n, kVec) blocks of kThreads.
template <int kVec, typename T, typename Op, typename... In>
__global__ void map_kernel(Op op, int64_t n, T* __restrict__ out, const In* __restrict__... in) {
  using P = Pack<T, kVec>;
  constexpr int kIn = sizeof...(In);
  const int64_t n_vec = n / kVec;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads * kUnroll + threadIdx.x;
  P v[kIn][kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = first + static_cast<int64_t>(u) * kThreads;
    if (i >= n_vec) break;
    int j = 0;  // the comma fold runs left to right: input j into v[j]
    ((v[j++][u] = reinterpret_cast<const P*>(in)[i]), ...);
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = first + static_cast<int64_t>(u) * kThreads;
    if (i >= n_vec) break;
    P o;
#pragma unroll
    for (int k = 0; k < kVec; ++k) o.v[k] = apply_at(op, v, u, k, std::make_index_sequence<kIn>{});
    reinterpret_cast<P*>(out)[i] = o;
  }
  if (blockIdx.x == 0)
    for (int64_t e = n_vec * kVec + threadIdx.x; e < n; e += kThreads) out[e] = op(in[e]...);
}

// Blocks for map_kernel<kVec> over n elements: one per tile, at least one (the tail).
inline int64_t map_blocks(int64_t n, int kVec) {
  const int64_t tile = int64_t{kThreads} * kUnroll;
  const int64_t blocks = (n / kVec + tile - 1) / tile;
  return blocks > 0 ? blocks : 1;
}

/// Launches out = op(a) on `stream`, vectorised when every pointer is 16-byte aligned.
template <typename T, typename Op>
void launch_map1(Op op, const T* a, T* out, int64_t n, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  if (aligned16(a) && aligned16(out)) {
    map_kernel<kVec><<<static_cast<unsigned>(map_blocks(n, kVec)), kThreads, 0, stream>>>(op, n, out, a);
  } else {
    map_kernel<1><<<static_cast<unsigned>(map_blocks(n, 1)), kThreads, 0, stream>>>(op, n, out, a);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

/// Launches out = op(a, b) on `stream`, vectorised when every pointer is aligned.
template <typename T, typename Op>
void launch_map2(Op op, const T* a, const T* b, T* out, int64_t n, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  if (aligned16(a) && aligned16(b) && aligned16(out)) {
    map_kernel<kVec><<<static_cast<unsigned>(map_blocks(n, kVec)), kThreads, 0, stream>>>(op, n, out, a, b);
  } else {
    map_kernel<1><<<static_cast<unsigned>(map_blocks(n, 1)), kThreads, 0, stream>>>(op, n, out, a, b);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace kiln::ops::cuda
