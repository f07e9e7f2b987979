// CUDA bias_gelu on raw pointers and a stream.
//
// Forward is a map over (rows, n) in the maps' tile layout (cuda_support.cuh), each
// element taking the bias column j = i mod n: 16-byte packs when n and the buffers
// allow (a pack then never straddles two rows), else single elements.
//
// Backward: a block is 32 columns (of packs, or of single elements) by 8 row lanes
// over one block of rows; each thread walks its column down every 8th row of the
// block with four rows' loads in flight, writes dx and keeps its column sums in
// registers; the block adds its 8 lanes in shared memory, in lane order, into one
// row of partial sums, and a second kernel adds those rows, again in a fixed order
// (deterministic: no atomics). The grid is one wave: as many blocks as the device
// holds at once (bias_gelu_backward_row_blocks). Where each thread took one element of
// a column at a time, with one load of each input in flight, the lease of 2026-12-04
// (H200) measured 0.70 of a device copy at 2^26 floats and 0.77-0.98x ATen at
// 2^16-2^24.
#include "../cuda_support.cuh"
#include "../gelu/gelu_cuda_math.cuh"
#include "bias_gelu_kernel.h"

#include <algorithm>
#include <initializer_list>
#include <type_traits>

namespace kiln::ops::cuda {
namespace {

// y = gelu(x + b) over this block's tile of packs of kVec elements (kVec = 1: single
// elements); row_packs = n / kVec packs make one row, so pack i takes bias pack
// i mod row_packs.
template <int kVec, typename T>
__global__ void __launch_bounds__(MapShape<kVec>::kBlock)
    forward_kernel(const T* __restrict__ x, const T* __restrict__ b, T* __restrict__ y, int64_t packs,
                   int64_t row_packs) {
  using S = MapShape<kVec>;
  using M = opmath_t<T>;
  using P = Pack<T, kVec>;
  const auto* px = reinterpret_cast<const P*>(x);
  const auto* pb = reinterpret_cast<const P*>(b);
  auto* py = reinterpret_cast<P*>(y);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * S::kTile + threadIdx.x;
  // The bias pack of each of this thread's packs, kBlock apart: one division, then
  // steps of kBlock mod row_packs (both terms below row_packs: one subtraction wraps).
  const int64_t step = S::kBlock % row_packs;
  int64_t column = first % row_packs;
  P xv[S::kPacks], bv[S::kPacks];
#pragma unroll
  for (int u = 0; u < S::kPacks; ++u) {
    const int64_t i = first + static_cast<int64_t>(u) * S::kBlock;
    if (i >= packs) break;
    xv[u] = px[i];
    bv[u] = pb[column];
    column += step;
    if (column >= row_packs) column -= row_packs;
  }
#pragma unroll
  for (int u = 0; u < S::kPacks; ++u) {
    const int64_t i = first + static_cast<int64_t>(u) * S::kBlock;
    if (i >= packs) break;
    P o;
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      o.v[k] = static_cast<T>(gelu_device::forward<T>(static_cast<M>(xv[u].v[k]) + static_cast<M>(bv[u].v[k])));
    py[i] = o;
  }
}

constexpr int kColumns = 32;  // column lanes of a backward block (one warp across)
constexpr int kLanes = 8;     // row lanes
constexpr int kRowsInFlight = 4;

// dx = grad·gelu'(x + b); partial[blockIdx.y, j] = Σ over this block's rows of dx[r, j].
// Blocks of kColumns × kLanes threads; columns are packs of kVec (kVec = 1: elements).
template <int kVec, typename T, typename M>
__global__ void __launch_bounds__(kColumns* kLanes)
    backward_kernel(const T* __restrict__ g, const T* __restrict__ x, const T* __restrict__ b,
                    T* __restrict__ dx, M* __restrict__ partial, int64_t rows, int64_t row_packs,
                    int64_t rows_per_block) {
  using P = Pack<T, kVec>;
  const auto* pg = reinterpret_cast<const P*>(g);
  const auto* px = reinterpret_cast<const P*>(x);
  auto* pdx = reinterpret_cast<P*>(dx);
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColumns + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_block;
  const int64_t r1 = min(rows, r0 + rows_per_block);
  M acc[kVec] = {};
  if (c < row_packs) {
    const P bv = reinterpret_cast<const P*>(b)[c];
    M bias[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) bias[k] = static_cast<M>(bv.v[k]);
    const auto finish = [&](const P& gv, const P& xv, int64_t i) {
      P o;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const M d = static_cast<M>(gv.v[k]) * gelu_device::derivative<T>(static_cast<M>(xv.v[k]) + bias[k]);
        o.v[k] = static_cast<T>(d);
        acc[k] += d;
      }
      pdx[i] = o;
    };
    int64_t r = r0 + threadIdx.y;
    for (; r + (kRowsInFlight - 1) * kLanes < r1; r += kRowsInFlight * kLanes) {
      P gv[kRowsInFlight], xv[kRowsInFlight];
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) {
        const int64_t i = (r + u * kLanes) * row_packs + c;
        gv[u] = pg[i];
        xv[u] = px[i];
      }
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) finish(gv[u], xv[u], (r + u * kLanes) * row_packs + c);
    }
    for (; r < r1; r += kLanes) finish(pg[r * row_packs + c], px[r * row_packs + c], r * row_packs + c);
  }
  // The lanes' sums, added in lane order by lane 0 ([lane][k][column]: no bank conflicts).
  __shared__ M sums[kLanes][kVec][kColumns];
#pragma unroll
  for (int k = 0; k < kVec; ++k) sums[threadIdx.y][k][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y == 0 && c < row_packs) {
    const int64_t n = row_packs * kVec;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      M total = sums[0][k][threadIdx.x];
#pragma unroll
      for (int lane = 1; lane < kLanes; ++lane) total += sums[lane][k][threadIdx.x];
      partial[blockIdx.y * n + c * kVec + k] = total;
    }
  }
}

// db[j] = Σ_k partial[k, j] over `blocks` rows: blocks of kColumns columns × kLanes
// lanes, lane l adding the rows l, l + kLanes, …, then lane 0 the lanes in order.
template <typename T, typename M>
__global__ void __launch_bounds__(kColumns* kLanes)
    sum_blocks_kernel(const M* __restrict__ partial, T* __restrict__ db, int64_t blocks, int64_t n) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColumns + threadIdx.x;
  M acc = 0;
  if (j < n)
    for (int64_t k = threadIdx.y; k < blocks; k += kLanes) acc += partial[k * n + j];
  __shared__ M sums[kLanes][kColumns];
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < n) {
#pragma unroll
    for (int lane = 1; lane < kLanes; ++lane) acc += sums[lane][threadIdx.x];
    db[j] = static_cast<T>(acc);
  }
}

template <typename T>
bool packs_fit(int64_t n, std::initializer_list<const void*> pointers) {
  if (n % (16 / sizeof(T)) != 0) return false;
  for (const void* p : pointers)
    if (!aligned16(p)) return false;
  return true;
}

}  // namespace

void bias_gelu_forward(DType dtype, const void* x, const void* b, void* y, int64_t rows, int64_t n,
                       CUstream_st* stream) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    const auto launch = [&](auto vec) {
      constexpr int kVec = decltype(vec)::value;
      const int64_t packs = rows * n / kVec;
      forward_kernel<kVec><<<static_cast<unsigned>(map_blocks(packs * kVec, kVec, MapShape<kVec>::kTile)),
                             MapShape<kVec>::kBlock, 0, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(b), static_cast<T*>(y), packs, n / kVec);
    };
    if (packs_fit<T>(n, {x, b, y})) {
      launch(std::integral_constant<int, 16 / sizeof(T)>{});
    } else {
      launch(std::integral_constant<int, 1>{});
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

namespace {

// The blocks of the backward kernel for packs of kVec elements of T that one
// multiprocessor runs together (the occupancy calculator: registers, shared memory).
template <int kVec, typename T>
int backward_blocks_per_sm() {
  static const int blocks = [] {
    int b = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, backward_kernel<kVec, T, opmath_t<T>>,
                                                                 kColumns * kLanes, 0));
    return std::max(1, b);
  }();
  return blocks;
}

}  // namespace

int64_t bias_gelu_backward_row_blocks(DType dtype, int64_t rows, int64_t n) {
  // One wave: as many blocks as the device holds at once, over the column blocks of a
  // row (32 packs, or 32 elements where n does not divide into packs), each block then
  // walking its share of the rows; at least one row per lane. The rows are all the
  // work, so a second, partial wave would leave most of the device idle while it runs:
  // the former count, 8 blocks an SM whatever the kernel's occupancy, made 1.6 waves
  // of the float32 kernel at n = 1024 (5 blocks an SM fit then).
  // (The packing n allows; the launch also needs aligned buffers, else it takes
  // single elements with this count of row blocks all the same.)
  int64_t per_sm = 1, per_pack = 1;
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    constexpr int kPacked = 16 / sizeof(T);
    const bool packed = n % kPacked == 0;
    per_sm = packed ? backward_blocks_per_sm<kPacked, T>() : backward_blocks_per_sm<1, T>();
    per_pack = packed ? kPacked : 1;
  });
  const int64_t resident = device_sms() * per_sm;
  const int64_t column_blocks = (n / per_pack + kColumns - 1) / kColumns;
  const int64_t want = std::max<int64_t>(1, resident / column_blocks);
  const int64_t most = std::max<int64_t>(1, (rows + kLanes - 1) / kLanes);
  return std::min<int64_t>(std::min<int64_t>(want, most), 65535);
}

void bias_gelu_backward(DType dtype, const void* grad, const void* x, const void* b, void* dx,
                        void* partial, void* db, int64_t rows, int64_t n, CUstream_st* stream) {
  const int64_t blocks_y = bias_gelu_backward_row_blocks(dtype, rows, n);
  const int64_t rows_per_block = (rows + blocks_y - 1) / blocks_y;
  const dim3 block(kColumns, kLanes);
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    using M = opmath_t<T>;
    const auto launch = [&](auto vec) {
      constexpr int kVec = decltype(vec)::value;
      const int64_t row_packs = n / kVec;
      const dim3 grid(static_cast<unsigned>((row_packs + kColumns - 1) / kColumns),
                      static_cast<unsigned>(blocks_y));
      backward_kernel<kVec><<<grid, block, 0, stream>>>(
          static_cast<const T*>(grad), static_cast<const T*>(x), static_cast<const T*>(b),
          static_cast<T*>(dx), static_cast<M*>(partial), rows, row_packs, rows_per_block);
    };
    if (packs_fit<T>(n, {grad, x, b, dx})) {
      launch(std::integral_constant<int, 16 / sizeof(T)>{});
    } else {
      launch(std::integral_constant<int, 1>{});
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    sum_blocks_kernel<<<static_cast<unsigned>((n + kColumns - 1) / kColumns), block, 0, stream>>>(
        static_cast<const M*>(partial), static_cast<T*>(db), blocks_y, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace kiln::ops::cuda
