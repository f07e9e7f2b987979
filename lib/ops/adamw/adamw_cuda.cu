// CUDA AdamW as one multi-tensor kernel (apex's multi_tensor_apply idea): a table
// of up to kTensorsPerLaunch tensors travels as a kernel argument, each block
// updates one chunk of one tensor, so one launch covers many tensors. Raw pointers
// and a stream only; the Tensor side lives in adamw_cuda.cpp.
#include "../cuda_support.cuh"
#include "adamw_kernel.h"

namespace kiln::ops::cuda {
namespace {

// 64 tensors × (4 pointers + a size + a block offset) = 2.8 KB, well inside the
// 4 KB a kernel's arguments may take on every CUDA version.
constexpr int kTensorsPerLaunch = 64;
// Elements per block: 4 packed loads of 16 bytes per thread for float32.
constexpr int64_t kChunk = kThreads * 16;

struct TensorTable {
  void* param[kTensorsPerLaunch];
  const void* grad[kTensorsPerLaunch];
  void* exp_avg[kTensorsPerLaunch];
  void* exp_avg_sq[kTensorsPerLaunch];
  int64_t n[kTensorsPerLaunch];
  // Blocks first_block[t] … first_block[t+1]−1 update tensor t.
  int first_block[kTensorsPerLaunch + 1];
  int count;
};

template <typename O>
struct DeviceCoefficients {
  O decay, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, inv_sqrt_bc2, eps;
};

// The update of one element, in opmath (see AdamWCoefficients for the maths).
template <typename T, typename O>
__device__ __forceinline__ void adamw_math(T& p, T g, T& m, T& v, const DeviceCoefficients<O>& k) {
  const O gf = static_cast<O>(g);
  const O mf = fma(gf, k.one_minus_beta1, static_cast<O>(m) * k.beta1);
  const O vf = fma(gf * gf, k.one_minus_beta2, static_cast<O>(v) * k.beta2);
  const O denom = fma(sqrt(vf), k.inv_sqrt_bc2, k.eps);
  p = static_cast<T>(static_cast<O>(p) * k.decay - k.step_size * mf / denom);
  m = static_cast<T>(mf);
  v = static_cast<T>(vf);
}

// True when all four pointers are 16-byte aligned (one test on their OR).
__device__ __forceinline__ bool all_aligned16(const void* a, const void* b, const void* c,
                                              const void* d) {
  const auto bits = reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) |
                    reinterpret_cast<uintptr_t>(c) | reinterpret_cast<uintptr_t>(d);
  return bits % 16 == 0;
}

template <typename T>
__global__ void adamw_kernel(TensorTable table, DeviceCoefficients<opmath_t<T>> k) {
  // Which tensor this block serves: a binary search over the block offsets.
  const int block = static_cast<int>(blockIdx.x);
  int lo = 0, hi = table.count;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (table.first_block[mid] <= block) lo = mid; else hi = mid;
  }
  const int64_t n = table.n[lo];
  const int64_t begin = static_cast<int64_t>(block - table.first_block[lo]) * kChunk;
  const int64_t end = begin + kChunk < n ? begin + kChunk : n;
  T* __restrict__ p = static_cast<T*>(table.param[lo]);
  const T* __restrict__ g = static_cast<const T*>(table.grad[lo]);
  T* __restrict__ m = static_cast<T*>(table.exp_avg[lo]);
  T* __restrict__ v = static_cast<T*>(table.exp_avg_sq[lo]);

  constexpr int kVec = 16 / sizeof(T);
  int64_t scalar_from = begin;
  // Chunks start at multiples of kChunk, so 16-byte-aligned bases stay aligned.
  if (all_aligned16(p, g, m, v)) {
    using P = Pack<T, kVec>;
    const int64_t packs_end = end / kVec;
    for (int64_t i = begin / kVec + threadIdx.x; i < packs_end; i += blockDim.x) {
      P pp = reinterpret_cast<const P*>(p)[i], mp = reinterpret_cast<const P*>(m)[i],
        vp = reinterpret_cast<const P*>(v)[i];
      const P gp = reinterpret_cast<const P*>(g)[i];
#pragma unroll
      for (int j = 0; j < kVec; ++j) adamw_math(pp.v[j], gp.v[j], mp.v[j], vp.v[j], k);
      reinterpret_cast<P*>(p)[i] = pp, reinterpret_cast<P*>(m)[i] = mp,
                           reinterpret_cast<P*>(v)[i] = vp;
    }
    scalar_from = packs_end * kVec;
  }
  for (int64_t i = scalar_from + threadIdx.x; i < end; i += blockDim.x)
    adamw_math(p[i], g[i], m[i], v[i], k);
}

template <typename T>
void launch(const TensorTable& table, const AdamWCoefficients& c, cudaStream_t stream) {
  using O = opmath_t<T>;
  const DeviceCoefficients<O> k{O(c.decay), O(c.beta1), O(1 - c.beta1), O(c.beta2),
                                O(1 - c.beta2), O(c.step_size), O(c.inv_sqrt_bias_correction2),
                                O(c.eps)};
  adamw_kernel<T><<<table.first_block[table.count], kThreads, 0, stream>>>(table, k);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void adamw_update(DType dtype, const AdamWSpan* spans, int64_t count, const AdamWCoefficients& c,
                  CUstream_st* stream) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    TensorTable table{};
    for (int64_t i = 0; i < count; ++i) {
      const auto& s = spans[i];
      const int slot = table.count;
      table.param[slot] = s.param, table.grad[slot] = s.grad;
      table.exp_avg[slot] = s.exp_avg, table.exp_avg_sq[slot] = s.exp_avg_sq;
      table.n[slot] = s.n;
      table.first_block[slot + 1] =
          table.first_block[slot] + static_cast<int>((s.n + kChunk - 1) / kChunk);
      table.count = slot + 1;
      // A full table, or the last tensor: launch, then start a new table.
      if (table.count == kTensorsPerLaunch || i + 1 == count) {
        launch<T>(table, c, stream);
        table = TensorTable{};
      }
    }
  });
}

}  // namespace kiln::ops::cuda
