// CUDA cross entropy: per-row online max/sum-exp with warp and block reductions,
// a one-block mean, and the per-row backward; launchers on raw pointers and a
// stream (the Tensor side lives in cross_entropy_cuda.cpp, so this file sees no ATen).
#include <c10/macros/Macros.h>

#include <cfloat>
#include <cstdio>

#include "../cuda_support.cuh"
#include "cross_entropy_kernel.h"

namespace kiln::ops::cuda {
namespace {

__device__ inline float exp_of(float v) { return expf(v); }
__device__ inline double exp_of(double v) { return ::exp(v); }
__device__ inline float log_of(float v) { return logf(v); }
__device__ inline double log_of(double v) { return ::log(v); }

// The lowest finite value: the running max starts there, not at −inf, so a
// rescale factor is never exp(−inf − (−inf)) = NaN.
template <typename A> __device__ A lowest();
template <> __device__ float lowest<float>() { return -FLT_MAX; }
template <> __device__ double lowest<double>() { return -DBL_MAX; }

template <typename T>
__device__ T from_double(double v) {
  if constexpr (sizeof(T) == sizeof(double)) return v;
  else return static_cast<T>(static_cast<float>(v));
}

// A running max m and Σ exp(x − m) over the values seen; NaN propagates through s.
template <typename A>
struct MaxSum {
  A m, s;
  __device__ void add(A v) {
    if (v > m) {
      s = s * exp_of(m - v) + A(1);
      m = v;
    } else {
      s += exp_of(v - m);
    }
  }
  __device__ static MaxSum merge(MaxSum a, MaxSum b) {
    const A m = a.m > b.m ? a.m : b.m;
    return {m, a.s * exp_of(a.m - m) + b.s * exp_of(b.m - m)};
  }
};

template <typename A>
__device__ MaxSum<A> warp_merge(MaxSum<A> v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v = MaxSum<A>::merge(v, {__shfl_xor_sync(0xffffffffu, v.m, offset),
                             __shfl_xor_sync(0xffffffffu, v.s, offset)});
  return v;
}

// kRowThreads threads per row: a warp (8 rows per block) for short rows, the
// whole block for long ones. Blocks have kThreads threads.
template <int kRowThreads>
struct RowMap {
  static constexpr int kRowsPerBlock = kThreads / kRowThreads;
  static __device__ int lane() { return threadIdx.x % kRowThreads; }
  static __device__ int64_t row() {
    return static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kRowThreads;
  }
  static int blocks(int64_t rows) {
    return static_cast<int>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  }
};

// lse[r] = m + log s over the row; nll[r] = lse[r] − logits[r, target[r]].
template <int kRowThreads, typename T>
__global__ void forward_kernel(const T* __restrict__ logits, const int64_t* __restrict__ target,
                               opmath_t<T>* __restrict__ lse, opmath_t<T>* __restrict__ nll,
                               int64_t rows, int64_t classes) {
  using A = opmath_t<T>;
  using Map = RowMap<kRowThreads>;
  const int64_t row = Map::row();
  if (row >= rows) return;  // a whole warp (or, with one row per block, no thread) leaves
  const int lane = Map::lane();
  const T* x = logits + row * classes;
  MaxSum<A> st{lowest<A>(), A(0)};
  for (int64_t j = lane; j < classes; j += kRowThreads) st.add(static_cast<A>(x[j]));
  st = warp_merge(st);
  if constexpr (kRowThreads > 32) {
    constexpr int kWarps = kRowThreads / 32;
    __shared__ A warp_m[kWarps], warp_s[kWarps];
    if (lane % 32 == 0) {
      warp_m[lane / 32] = st.m;
      warp_s[lane / 32] = st.s;
    }
    __syncthreads();
    if (lane < 32)
      st = warp_merge(lane < kWarps ? MaxSum<A>{warp_m[lane], warp_s[lane]}
                                    : MaxSum<A>{lowest<A>(), A(0)});
  }
  if (lane == 0) {
    const A l = st.m + log_of(st.s);
    lse[row] = l;
    const int64_t t = target[row];
    // A class index out of range stops the stream with kiln's message (printed by the
    // device, then the assertion that the host's next CUDA call reports), as ATen's
    // nll_loss checks in its kernel: no host sync, no launch of its own. Should the
    // assertion ever be compiled out, the row's loss is NaN, never a bad read.
    CUDA_KERNEL_ASSERT_PRINTF(t >= 0 && t < classes,
                              "kiln::cross_entropy_forward: target: expected class indices in "
                              "[0, %lld), got target[%lld] = %lld",
                              static_cast<long long>(classes), static_cast<long long>(row),
                              static_cast<long long>(t));
    nll[row] = (t >= 0 && t < classes) ? l - static_cast<A>(x[t]) : A(NAN);
  }
}

// loss[0] = Σ nll / rows in double, in a fixed order (deterministic).
template <typename T>
__global__ void mean_kernel(const opmath_t<T>* __restrict__ nll, T* __restrict__ loss, int64_t rows) {
  __shared__ double part[kThreads];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < rows; i += kThreads) sum += static_cast<double>(nll[i]);
  part[threadIdx.x] = sum;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width >>= 1) {
    if (threadIdx.x < width) part[threadIdx.x] += part[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = from_double<T>(rows > 0 ? part[0] / static_cast<double>(rows) : NAN);
}

// out[r, j] = scale·(exp(x[r, j] − lse[r]) − [j == target[r]]), scale = grad/rows.
template <int kRowThreads, typename T>
__global__ void backward_kernel(const T* __restrict__ grad, const T* __restrict__ logits,
                                const int64_t* __restrict__ target,
                                const opmath_t<T>* __restrict__ lse, T* __restrict__ out,
                                int64_t rows, int64_t classes) {
  using A = opmath_t<T>;
  using Map = RowMap<kRowThreads>;
  const int64_t row = Map::row();
  if (row >= rows) return;
  const A scale = static_cast<A>(*grad) / static_cast<A>(rows);
  const A l = lse[row];
  const int64_t t = target[row];
  if (Map::lane() == 0) {  // the forward's check, for a direct call of the backward
    CUDA_KERNEL_ASSERT_PRINTF(t >= 0 && t < classes,
                              "kiln::cross_entropy_backward: target: expected class indices in "
                              "[0, %lld), got target[%lld] = %lld",
                              static_cast<long long>(classes), static_cast<long long>(row),
                              static_cast<long long>(t));
  }
  const T* x = logits + row * classes;
  T* o = out + row * classes;
  for (int64_t j = Map::lane(); j < classes; j += kRowThreads) {
    A p = exp_of(static_cast<A>(x[j]) - l) * scale;
    if (j == t) p -= scale;
    o[j] = static_cast<T>(p);
  }
}

// Rows of up to this many classes get a warp each, longer ones a block.
constexpr int64_t kWarpRowMax = 1024;

}  // namespace

void cross_entropy_forward(DType dtype, const void* logits, const int64_t* target, void* lse,
                           void* nll, void* loss, int64_t rows, int64_t classes,
                           CUstream_st* stream) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    using A = opmath_t<T>;
    const auto* x = static_cast<const T*>(logits);
    auto* l = static_cast<A*>(lse);
    auto* n = static_cast<A*>(nll);
    if (rows > 0) {
      if (classes <= kWarpRowMax) {
        forward_kernel<32><<<RowMap<32>::blocks(rows), kThreads, 0, stream>>>(x, target, l, n, rows,
                                                                             classes);
      } else {
        forward_kernel<kThreads><<<RowMap<kThreads>::blocks(rows), kThreads, 0, stream>>>(
            x, target, l, n, rows, classes);
      }
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    mean_kernel<T><<<1, kThreads, 0, stream>>>(n, static_cast<T*>(loss), rows);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

void cross_entropy_backward(DType dtype, const void* grad, const void* logits,
                            const int64_t* target, const void* lse, void* grad_logits,
                            int64_t rows, int64_t classes, CUstream_st* stream) {
  if (rows == 0) return;
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    using A = opmath_t<T>;
    const auto* g = static_cast<const T*>(grad);
    const auto* x = static_cast<const T*>(logits);
    const auto* l = static_cast<const A*>(lse);
    auto* o = static_cast<T*>(grad_logits);
    if (classes <= kWarpRowMax) {
      backward_kernel<32><<<RowMap<32>::blocks(rows), kThreads, 0, stream>>>(g, x, target, l, o,
                                                                            rows, classes);
    } else {
      backward_kernel<kThreads><<<RowMap<kThreads>::blocks(rows), kThreads, 0, stream>>>(
          g, x, target, l, o, rows, classes);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace kiln::ops::cuda
