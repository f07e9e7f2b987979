// What kiln's .cu files share, without including ATen: the float "opmath" type
// for half and bfloat16, dtype dispatch to CUDA types, and launchers for
// elementwise maps that use 16-byte loads when the buffers allow it.
#pragma once
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
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

/// The multiprocessors of the device current at the first call.
inline int device_sms() {
  static const int sms = [] {
    int device = 0, count = 0;
    C10_CUDA_CHECK(cudaGetDevice(&device));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
  }();
  return sms;
}

/// Blocks for a grid-stride loop over `items`: enough to fill the device, no more.
inline int grid_for(int64_t items) {
  const int max_blocks = device_sms() * 16;
  const int64_t want = (items + kThreads - 1) / kThreads;
  return static_cast<int>(want < max_blocks ? (want > 0 ? want : 1) : max_blocks);
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The maps' layout is ATen's vectorised elementwise kernel's on sm_90 (torch 2.11,
// CUDALoops.cuh): blocks of 128 threads, 8 elements a thread (16-byte packs: two of
// float, one of half or bfloat16, four of double), a block per tile of 128 × packs,
// thread t taking the packs t, t + 128, … of its tile so each warp's loads are
// contiguous, and all of a thread's loads from every input issued before it uses the
// first. The lease of 2026-12-04 (H200) measured the two forms before it: four
// packs a grid stride apart in a grid capped at 16 blocks an SM, 0.92-0.96 of
// ATen's speed at 2^24-2^26 floats; a tile of 256 threads × 4 packs, 0.96-1.00.
template <int kVec>
struct MapShape {
  static constexpr int kBlock = 128;
  static constexpr int kPacks = kVec >= 8 ? 1 : 8 / kVec;
  static constexpr int64_t kTile = int64_t{kBlock} * kPacks;  // packs a block takes
};

/// The inputs of a map: kIn pointers of one type.
template <typename In, int kIn>
struct MapInputs {
  const In* p[kIn];
};

// op applied to element k of the u-th packs of every input.
template <int kPacks, typename Op, typename P, size_t... I>
__device__ __forceinline__ auto apply_at(const Op& op, const P (&v)[sizeof...(I)][kPacks], int u, int k,
                                         std::index_sequence<I...>) {
  return op(v[I][u].v[k]...);
}

// op applied to element e of every input.
template <typename Op, typename In, int kIn, size_t... I>
__device__ __forceinline__ auto apply_to(const Op& op, const MapInputs<In, kIn>& in, int64_t e,
                                         std::index_sequence<I...>) {
  return op(in.p[I][e]...);
}

// out[i] = op(in[0][i], …) over n elements: this block's tile of kBlock × kPacks packs
// of kVec elements (those past n / kVec skipped), and block 0 the scalar tail. Every
// pointer is 16-byte aligned when kVec > 1 (the launchers check). Launch
// map_blocks(n, kVec, kBlock * kPacks) blocks of kBlock threads.
template <int kVec, int kBlock, int kPacks, typename Out, typename In, int kIn, typename Op>
__global__ void __launch_bounds__(kBlock)
    map_kernel(Op op, int64_t n, Out* __restrict__ out, MapInputs<In, kIn> in) {
  using PI = Pack<In, kVec>;
  using PO = Pack<Out, kVec>;
  const int64_t n_vec = n / kVec;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kBlock * kPacks + threadIdx.x;
  PI v[kIn][kPacks];
#pragma unroll
  for (int u = 0; u < kPacks; ++u) {
    const int64_t i = first + static_cast<int64_t>(u) * kBlock;
    if (i >= n_vec) break;
#pragma unroll
    for (int j = 0; j < kIn; ++j) v[j][u] = reinterpret_cast<const PI*>(in.p[j])[i];
  }
#pragma unroll
  for (int u = 0; u < kPacks; ++u) {
    const int64_t i = first + static_cast<int64_t>(u) * kBlock;
    if (i >= n_vec) break;
    PO o;
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      o.v[k] = apply_at<kPacks>(op, v, u, k, std::make_index_sequence<kIn>{});
    reinterpret_cast<PO*>(out)[i] = o;
  }
  if (blockIdx.x == 0)
    for (int64_t e = n_vec * kVec + threadIdx.x; e < n; e += kBlock)
      out[e] = apply_to(op, in, e, std::make_index_sequence<kIn>{});
}

// Blocks for a tiled kernel over n elements in packs of kVec, `tile` packs a block:
// one per tile, at least one (the tail).
inline int64_t map_blocks(int64_t n, int kVec, int64_t tile) {
  const int64_t blocks = (n / kVec + tile - 1) / tile;
  return blocks > 0 ? blocks : 1;
}

/// Launches out = op(in[0], …) over n elements on `stream`: 16-byte packs of the wider
/// of In and Out when every pointer is 16-byte aligned, else single elements, in
/// MapShape's layout.
template <typename Out, typename In, int kIn, typename Op>
void launch_map(Op op, int64_t n, cudaStream_t stream, Out* out, MapInputs<In, kIn> in) {
  bool aligned = aligned16(out);
  for (const In* p : in.p) aligned = aligned && aligned16(p);
  const auto launch = [&](auto vec) {
    constexpr int kVec = decltype(vec)::value;
    using S = MapShape<kVec>;
    map_kernel<kVec, S::kBlock, S::kPacks>
        <<<static_cast<unsigned>(map_blocks(n, kVec, S::kTile)), S::kBlock, 0, stream>>>(op, n, out, in);
  };
  constexpr int kWide = 16 / (sizeof(In) > sizeof(Out) ? sizeof(In) : sizeof(Out));
  if (aligned) {
    launch(std::integral_constant<int, kWide>{});
  } else {
    launch(std::integral_constant<int, 1>{});
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

/// Launches out = op(a) on `stream` (a and out may differ in type).
template <typename Out, typename In, typename Op>
void launch_map1(Op op, const In* a, Out* out, int64_t n, cudaStream_t stream) {
  launch_map(op, n, stream, out, MapInputs<In, 1>{{a}});
}

/// Launches out = op(a, b) on `stream`.
template <typename T, typename Op>
void launch_map2(Op op, const T* a, const T* b, T* out, int64_t n, cudaStream_t stream) {
  launch_map(op, n, stream, out, MapInputs<T, 2>{{a, b}});
}

}  // namespace kiln::ops::cuda
