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

/// The inputs of a map: one pointer per input, each of its own type (a mixed-dtype
/// map reads float32 beside a half type without a float32 copy of the half one).
template <typename... In>
struct MapInputs;
template <>
struct MapInputs<> {
  bool aligned() const { return true; }
  // op(args…, in[e]…) with every input's element e appended.
  template <typename Op, typename... A>
  __device__ __forceinline__ auto apply(const Op& op, int64_t, A... args) const {
    return op(args...);
  }
};
template <typename H, typename... T>
struct MapInputs<H, T...> {
  const H* head;
  MapInputs<T...> tail;
  bool aligned() const { return aligned16(head) && tail.aligned(); }
  template <typename Op, typename... A>
  __device__ __forceinline__ auto apply(const Op& op, int64_t e, A... args) const {
    return tail.apply(op, e, args..., head[e]);
  }
};

/// A thread's loaded packs of every input of a map: kPacks packs of kVec elements each.
template <int kVec, int kPacks, typename... In>
struct MapPacks;
template <int kVec, int kPacks>
struct MapPacks<kVec, kPacks> {
  __device__ __forceinline__ void load(const MapInputs<>&, int, int64_t) {}
  // op(args…, element k of every input's u-th pack…).
  template <typename Op, typename... A>
  __device__ __forceinline__ auto apply(const Op& op, int, int, A... args) const {
    return op(args...);
  }
};
template <int kVec, int kPacks, typename H, typename... T>
struct MapPacks<kVec, kPacks, H, T...> {
  Pack<H, kVec> head[kPacks];
  MapPacks<kVec, kPacks, T...> tail;
  // Pack i of every input into slot u.
  __device__ __forceinline__ void load(const MapInputs<H, T...>& in, int u, int64_t i) {
    head[u] = reinterpret_cast<const Pack<H, kVec>*>(in.head)[i];
    tail.load(in.tail, u, i);
  }
  template <typename Op, typename... A>
  __device__ __forceinline__ auto apply(const Op& op, int u, int k, A... args) const {
    return tail.apply(op, u, k, args..., head[u].v[k]);
  }
};

// out[i] = op(in[0][i], …) over n elements: this block's tile of kBlock × kPacks packs
// of kVec elements (those past n / kVec skipped), and block 0 the scalar tail. Every
// pointer is 16-byte aligned when kVec > 1 (the launchers check). Launch
// map_blocks(n, kVec, kBlock * kPacks) blocks of kBlock threads.
template <int kVec, int kBlock, int kPacks, typename Out, typename Op, typename... In>
__global__ void __launch_bounds__(kBlock)
    map_kernel(Op op, int64_t n, Out* __restrict__ out, MapInputs<In...> in) {
  using PO = Pack<Out, kVec>;
  const int64_t n_vec = n / kVec;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kBlock * kPacks + threadIdx.x;
  MapPacks<kVec, kPacks, In...> v;
#pragma unroll
  for (int u = 0; u < kPacks; ++u) {
    const int64_t i = first + static_cast<int64_t>(u) * kBlock;
    if (i >= n_vec) break;
    v.load(in, u, i);
  }
#pragma unroll
  for (int u = 0; u < kPacks; ++u) {
    const int64_t i = first + static_cast<int64_t>(u) * kBlock;
    if (i >= n_vec) break;
    PO o;
#pragma unroll
    for (int k = 0; k < kVec; ++k) o.v[k] = v.apply(op, u, k);
    reinterpret_cast<PO*>(out)[i] = o;
  }
  if (blockIdx.x == 0)
    for (int64_t e = n_vec * kVec + threadIdx.x; e < n; e += kBlock) out[e] = in.apply(op, e);
}

// Blocks for a tiled kernel over n elements in packs of kVec, `tile` packs a block:
// one per tile, at least one (the tail).
inline int64_t map_blocks(int64_t n, int kVec, int64_t tile) {
  const int64_t blocks = (n / kVec + tile - 1) / tile;
  return blocks > 0 ? blocks : 1;
}

/// The widest of the types' sizes.
template <typename... T>
constexpr size_t max_size() {
  size_t m = 0;
  ((m = sizeof(T) > m ? sizeof(T) : m), ...);
  return m;
}

/// Launches out = op(in[0], …) over n elements on `stream`: 16-byte packs of the widest
/// of the inputs' and the output's types when every pointer is 16-byte aligned, else
/// single elements, in MapShape's layout.
template <typename Out, typename Op, typename... In>
void launch_map(Op op, int64_t n, cudaStream_t stream, Out* out, MapInputs<In...> in) {
  const auto launch = [&](auto vec) {
    constexpr int kVec = decltype(vec)::value;
    using S = MapShape<kVec>;
    map_kernel<kVec, S::kBlock, S::kPacks>
        <<<static_cast<unsigned>(map_blocks(n, kVec, S::kTile)), S::kBlock, 0, stream>>>(op, n, out, in);
  };
  constexpr int kWide = static_cast<int>(16 / max_size<Out, In...>());
  if (aligned16(out) && in.aligned()) {
    launch(std::integral_constant<int, kWide>{});
  } else {
    launch(std::integral_constant<int, 1>{});
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

/// Launches out = op(a) on `stream` (a and out may differ in type).
template <typename Out, typename In, typename Op>
void launch_map1(Op op, const In* a, Out* out, int64_t n, cudaStream_t stream) {
  launch_map(op, n, stream, out, MapInputs<In>{a, {}});
}

/// Launches out = op(a, b) on `stream` (a, b and out may differ in type).
template <typename Out, typename A, typename B, typename Op>
void launch_map2(Op op, const A* a, const B* b, Out* out, int64_t n, cudaStream_t stream) {
  launch_map(op, n, stream, out, MapInputs<A, B>{a, {b, {}}});
}

}  // namespace kiln::ops::cuda
