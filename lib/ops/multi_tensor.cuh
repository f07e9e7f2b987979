// The CUDA side of the fused optimizer steps (adamw, lion, sgd): one multi-tensor
// kernel (apex's multi_tensor_apply idea). A table of up to kTensorsPerLaunch tensors
// of kLists lists travels as a kernel argument; each block updates one chunk of one
// tensor, so one launch covers many tensors. Raw pointers and a stream only.
#pragma once
#include "cuda_support.cuh"
#include "multi_tensor.h"

namespace kiln::ops::cuda {

// 64 tensors × (4 pointers + a size + a block offset) = 2.8 KB, well inside the
// 4 KB a kernel's arguments may take on every CUDA version.
constexpr int kTensorsPerLaunch = 64;
// Elements per block: 4 packed loads of 16 bytes per thread for float32.
constexpr int64_t kChunk = kThreads * 16;

template <int kLists>
struct TensorTable {
  void* data[kLists][kTensorsPerLaunch];
  int64_t n[kTensorsPerLaunch];
  // Blocks first_block[t] … first_block[t+1]−1 update tensor t.
  int first_block[kTensorsPerLaunch + 1];
  int count;
};

// True when every list's pointer is 16-byte aligned (one test on their OR).
template <int kLists, typename T>
__device__ __forceinline__ bool all_aligned16(T* const (&ptrs)[kLists]) {
  uintptr_t bits = 0;
#pragma unroll
  for (int k = 0; k < kLists; ++k) bits |= reinterpret_cast<uintptr_t>(ptrs[k]);
  return bits % 16 == 0;
}

// op(x) updates one element of every list in place: x[k] is list k's value. Lists
// whose bit is set in Op::kWritten are stored back; the others (the gradient) only read.
template <int kLists, typename T, typename Op>
__global__ void multi_tensor_kernel(TensorTable<kLists> table, Op op) {
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
  T* ptrs[kLists];
#pragma unroll
  for (int k = 0; k < kLists; ++k) ptrs[k] = static_cast<T*>(table.data[k][lo]);

  constexpr int kVec = 16 / sizeof(T);
  int64_t scalar_from = begin;
  // Chunks start at multiples of kChunk, so 16-byte-aligned bases stay aligned.
  if (all_aligned16<kLists>(ptrs)) {
    using P = Pack<T, kVec>;
    const int64_t packs_end = end / kVec;
    for (int64_t i = begin / kVec + threadIdx.x; i < packs_end; i += blockDim.x) {
      P packs[kLists];
#pragma unroll
      for (int k = 0; k < kLists; ++k) packs[k] = reinterpret_cast<const P*>(ptrs[k])[i];
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        T x[kLists];
#pragma unroll
        for (int k = 0; k < kLists; ++k) x[k] = packs[k].v[j];
        op(x);
#pragma unroll
        for (int k = 0; k < kLists; ++k) packs[k].v[j] = x[k];
      }
#pragma unroll
      for (int k = 0; k < kLists; ++k)
        if (Op::kWritten & (1 << k)) reinterpret_cast<P*>(ptrs[k])[i] = packs[k];
    }
    scalar_from = packs_end * kVec;
  }
  for (int64_t i = scalar_from + threadIdx.x; i < end; i += blockDim.x) {
    T x[kLists];
#pragma unroll
    for (int k = 0; k < kLists; ++k) x[k] = ptrs[k][i];
    op(x);
#pragma unroll
    for (int k = 0; k < kLists; ++k)
      if (Op::kWritten & (1 << k)) ptrs[k][i] = x[k];
  }
}

/// Runs op over every element of `count` spans of kLists lists on `stream`: one launch
/// per kTensorsPerLaunch spans. Example: multi_tensor_apply<3, float>(spans, n, LionOp<float>{…}, stream);
template <int kLists, typename T, typename Op>
void multi_tensor_apply(const TensorSpan* spans, int64_t count, const Op& op, cudaStream_t stream) {
  TensorTable<kLists> table{};
  for (int64_t i = 0; i < count; ++i) {
    const auto& s = spans[i];
    const int slot = table.count;
    for (int k = 0; k < kLists; ++k) table.data[k][slot] = s.data[k];
    table.n[slot] = s.n;
    table.first_block[slot + 1] =
        table.first_block[slot] + static_cast<int>((s.n + kChunk - 1) / kChunk);
    table.count = slot + 1;
    // A full table, or the last tensor: launch, then start a new table.
    if (table.count == kTensorsPerLaunch || i + 1 == count) {
      multi_tensor_kernel<kLists, T, Op><<<table.first_block[table.count], kThreads, 0, stream>>>(table, op);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      table = TensorTable<kLists>{};
    }
  }
}

}  // namespace kiln::ops::cuda
