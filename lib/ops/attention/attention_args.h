// The checks kiln::causal_attention's CPU and Meta kernels share, and its sizes.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <string_view>

#include "../dropout/dropout_args.h"
#include "attention_kernel.h"

namespace kiln::ops {

/// qkv: (B, T, 3C) bfloat16 or float32 with C divisible by heads; the sizes of the call.
inline cpu::AttentionShape attention_shape(std::string_view op, const at::Tensor& qkv, int64_t heads) {
  TORCH_CHECK(qkv.defined(), op, ": qkv: expected a tensor, got an undefined one");
  TORCH_CHECK(qkv.dim() == 3, op, ": qkv: expected a 3-D tensor (B, T, 3C), got shape ", qkv.sizes());
  TORCH_CHECK(qkv.scalar_type() == at::kBFloat16 || qkv.scalar_type() == at::kFloat, op,
              ": qkv: expected dtype BFloat16 or Float, got ", qkv.scalar_type());
  TORCH_CHECK(heads > 0, op, ": heads: expected > 0, got ", heads);
  const int64_t width = qkv.size(2);
  TORCH_CHECK(width % (3 * heads) == 0, op, ": qkv: expected a last dimension 3·heads·d (heads = ",
              heads, "), got ", width);
  TORCH_CHECK(width > 0, op, ": qkv: expected a last dimension 3·heads·d with d ≥ 1, got 0");
  return {qkv.size(0), qkv.size(1), heads, width / (3 * heads), qkv.scalar_type() == at::kFloat};
}

/// The kernels' dropout of the weights for p ∈ [0, 1] (checked) and seed.
inline cpu::AttentionDropout attention_dropout(std::string_view op, double p, int64_t seed) {
  const auto k = dropout_constants(op, p);
  cpu::AttentionDropout d;
  d.active = p > 0.0;
  d.seed = static_cast<uint64_t>(seed);
  d.keep_below = k.keep_below;
  d.scale = static_cast<float>(k.scale);
  return d;
}

/// grad and out (B, T, C) in qkv's dtype, lse (B, heads, T) float32, all on qkv's device.
inline void check_attention_backward(std::string_view op, const cpu::AttentionShape& s,
                                     const at::Tensor& qkv, const at::Tensor& grad,
                                     const at::Tensor& out, const at::Tensor& lse) {
  const int64_t c = s.heads * s.head_dim;
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"grad", &grad}, {"out", &out}}) {
    TORCH_CHECK(t->defined(), op, ": ", name, ": expected a tensor, got an undefined one");
    TORCH_CHECK(t->sizes() == at::IntArrayRef({s.batch, s.time, c}), op, ": ", name,
                ": expected shape [", s.batch, ", ", s.time, ", ", c, "] (B, T, C), got ", t->sizes());
    TORCH_CHECK(t->scalar_type() == qkv.scalar_type(), op, ": ", name, ": expected dtype ",
                qkv.scalar_type(), " (qkv's), got ", t->scalar_type());
    TORCH_CHECK(t->device() == qkv.device(), op, ": ", name, ": expected device ", qkv.device(),
                " (qkv's), got ", t->device());
  }
  TORCH_CHECK(lse.defined() && lse.sizes() == at::IntArrayRef({s.batch, s.heads, s.time}), op,
              ": lse: expected shape [", s.batch, ", ", s.heads, ", ", s.time, "] (B, heads, T), got ",
              lse.defined() ? lse.sizes() : at::IntArrayRef{});
  TORCH_CHECK(lse.scalar_type() == at::kFloat, op, ": lse: expected dtype Float, got ", lse.scalar_type());
  TORCH_CHECK(lse.device() == qkv.device(), op, ": lse: expected device ", qkv.device(), ", got ",
              lse.device());
}

}  // namespace kiln::ops
