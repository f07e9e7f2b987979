// causal_attention against what it replaces in kiln::nn::Gpt on the CPU: in bfloat16
// (autocast) the composite (q, k, v split into heads, baddbmm with the causal mask as
// bias, softmax, bmm, the heads merged); in float32 ATen's scaled_dot_product_attention
// (its CPU flash kernel) on the heads split and merged the same way, and with dropout
// the composite. Forward alone, forward + backward through autograd ("train"), and that
// with dropout 0.1 on the weights ("train-drop": the composite drops them with
// kiln::dropout, as the GPT did before the kernel took dropout). The GPT's shape: T
// 128, 6 heads of 32; n sets the batch, B = n / (T·C).
#include <ATen/ops/baddbmm.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <ATen/ops/softmax.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>

#include "cases.h"
#include "ops/ops.h"

namespace {

at::Tensor composite(const at::Tensor& qkv, int64_t heads, double p = 0.0) {
  const int64_t b = qkv.size(0), t = qkv.size(1), c = qkv.size(2) / 3, d = c / heads;
  const auto parts = qkv.view({b, t, 3, heads, d}).permute({2, 0, 3, 1, 4}).unbind(0);
  auto bias = at::zeros({t, t}, qkv.options());
  bias.masked_fill_(at::ones({t, t}, qkv.options().dtype(at::kBool)).triu(1), -INFINITY);
  const auto scores = at::baddbmm(bias.expand({b * heads, t, t}), parts[0].reshape({b * heads, t, d}),
                                  parts[1].reshape({b * heads, t, d}).transpose(1, 2), 1.0,
                                  1.0 / std::sqrt(static_cast<double>(d)));
  auto weights = at::softmax(scores, -1);
  if (p > 0.0) weights = kiln::ops::dropout(weights, p, 17);
  const auto a = at::bmm(weights, parts[2].reshape({b * heads, t, d}));
  return a.view({b, heads, t, d}).transpose(1, 2).reshape({b, t, c});
}

// ATen's fused attention on the heads of qkv, as kiln::nn::Gpt ran it in float32.
at::Tensor aten_sdpa(const at::Tensor& qkv, int64_t heads) {
  const int64_t b = qkv.size(0), t = qkv.size(1), c = qkv.size(2) / 3, d = c / heads;
  const auto parts = qkv.view({b, t, 3, heads, d}).permute({2, 0, 3, 1, 4}).unbind(0);
  const auto a = at::scaled_dot_product_attention(parts[0], parts[1], parts[2], {}, 0.0, /*is_causal=*/true);
  return a.transpose(1, 2).reshape({b, t, c});
}

}  // namespace

KILN_BENCH_CASES(attention) {
  const bool f32 = options.dtype() == at::kFloat;
  if ((!f32 && options.dtype() != at::kBFloat16) || !options.device().is_cpu()) return {};
  constexpr int64_t kTime = 128, kHeads = 6, kWidth = 192;
  const int64_t batch = std::max<int64_t>(1, n / (kTime * kWidth));
  const auto qkv = at::randn({batch, kTime, 3 * kWidth}, options);
  const auto grad = at::randn({batch, kTime, kWidth}, options);
  const auto leaf = [qkv] { return qkv.detach().requires_grad_(true); };
  return {
      {"attention", "fwd", [=] { kiln::ops::causal_attention(qkv, kHeads); },
       [=] { f32 ? aten_sdpa(qkv, kHeads) : composite(qkv, kHeads); }},
      {"attention", "train", [=] { kiln::ops::causal_attention(leaf(), kHeads).backward(grad); },
       [=] { (f32 ? aten_sdpa(leaf(), kHeads) : composite(leaf(), kHeads)).backward(grad); }},
      {"attention", "train-drop", [=] { kiln::ops::causal_attention(leaf(), kHeads, 0.1, 17).backward(grad); },
       [=] { composite(leaf(), kHeads, 0.1).backward(grad); }},
  };
}
