// Raw-pointer entry points of kiln's fused causal attention on the CPU, shared by the
// CPU capability builds and the Tensor-level code in attention_cpu.cpp.
#pragma once
#include <cstdint>

#include "../cpu_capability.h"

namespace kiln::ops::cpu {

/// The sizes of one call: qkv is (batch, time, 3·heads·head_dim), rows contiguous, in
/// bfloat16 or (float32 = true) float32, as are out, grad and dqkv; q, k and v are its
/// three thirds, each split into heads of head_dim.
struct AttentionShape {
  int64_t batch = 0, time = 0, heads = 0, head_dim = 0;
  bool float32 = false;
};

/// Dropout on the attention weights (the softmax's output), kiln::dropout's mask: the
/// weight of head bh, query i, key j is element (bh·time + i)·time + j of the
/// (batch·heads, time, time) weights, kept where its Philox word is below keep_below
/// (dropout_args.h) and then scaled. active = false: none.
struct AttentionDropout {
  bool active = false;
  uint64_t seed = 0;
  uint32_t keep_below = 0;
  float scale = 1.0f;
};

// out (batch, time, heads·head_dim) = softmax(q·kᵀ/√head_dim, causal)·v per head, in
// qkv's dtype; lse (batch, heads, time) float32, each row's log-sum-exp of its scaled
// scores. bf16_dot: bfloat16 only, use AVX512-BF16's dot products and conversions (only
// where the CPU has them). Computes the heads [begin, end) of the batch·heads (batch-major); threads take
// disjoint ranges. With dropout, out is the dropped weights times v; lse is the
// undropped softmax's.
KILN_DECLARE_CPU_KERNEL(causal_attention_forward,
                        (const AttentionShape& shape, const AttentionDropout& dropout, const void* qkv,
                         void* out, float* lse, bool bf16_dot, int64_t begin, int64_t end))
// dqkv (batch, time, 3·heads·head_dim) from grad (batch, time, heads·head_dim)
// and the forward's qkv, out and lse (and its dropout: the same mask, drawn again).
KILN_DECLARE_CPU_KERNEL(causal_attention_backward,
                        (const AttentionShape& shape, const AttentionDropout& dropout, const void* grad,
                         const void* qkv, const void* out, const float* lse, void* dqkv, bool bf16_dot,
                         int64_t begin, int64_t end))

}  // namespace kiln::ops::cpu
