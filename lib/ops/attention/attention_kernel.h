// Raw-pointer entry points of kiln's fused causal attention on the CPU, shared by the
// CPU capability builds and the Tensor-level code in attention_cpu.cpp.
#pragma once
#include <cstdint>

#include "../cpu_capability.h"

namespace kiln::ops::cpu {

/// The sizes of one call: qkv is (batch, time, 3·heads·head_dim) bfloat16, rows
/// contiguous; q, k and v are its three thirds, each split into heads of head_dim.
struct AttentionShape {
  int64_t batch = 0, time = 0, heads = 0, head_dim = 0;
};

// out (batch, time, heads·head_dim) bfloat16 = softmax(q·kᵀ/√head_dim, causal)·v per
// head; lse (batch, heads, time) float32, each row's log-sum-exp of its scaled scores.
// bf16_dot: use AVX512-BF16's dot products and conversions (only where the CPU has
// them). Computes the heads [begin, end) of the batch·heads (batch-major); threads take
// disjoint ranges.
KILN_DECLARE_CPU_KERNEL(causal_attention_forward,
                        (const AttentionShape& shape, const void* qkv, void* out, float* lse,
                         bool bf16_dot, int64_t begin, int64_t end))
// dqkv (batch, time, 3·heads·head_dim) bfloat16 from grad (batch, time, heads·head_dim)
// and the forward's qkv, out and lse.
KILN_DECLARE_CPU_KERNEL(causal_attention_backward,
                        (const AttentionShape& shape, const void* grad, const void* qkv,
                         const void* out, const float* lse, void* dqkv, bool bf16_dot,
                         int64_t begin, int64_t end))

}  // namespace kiln::ops::cpu
