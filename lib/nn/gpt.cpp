// kiln::nn::Gpt: the blocks, GPT-2's initialisation, the training forward pass
// and the cached decoding step that generation uses.
#include "nn/gpt.h"

#include <ATen/autocast_mode.h>
#include <ATen/ops/baddbmm.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/rms_norm.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <torch/nn/init.h>

#include <algorithm>
#include <cmath>

#include "nn/checkpoint.h"
#include "nn/trace.h"
#include "ops/cpu_bf16.h"
#include "ops/cpu_capability.h"
#include "ops/linear/linear_onednn.h"
#include "ops/ops.h"
#include "util/env_switch.h"

namespace kiln::nn {
namespace {

constexpr double kNormEps = 1e-5;
constexpr double kInitStd = 0.02;  // GPT-2's

std::optional<at::Tensor> bias_of(const LinearImpl& layer) {
  return layer.bias.defined() ? std::optional<at::Tensor>(layer.bias) : std::nullopt;
}


// Causal attention over queries, keys and values (B, heads, T, d) → (B, heads, T, d).
// ATen's fused kernel (flash / memory-efficient on CUDA, a flash loop on the CPU),
// except under CPU autocast: there ATen's CPU flash kernel runs its backward in
// bfloat16 at a quarter of its float32 speed (31.8 ms against 14.9 ms per block of
// B 32 × 6 heads × 128 × 32, measured), while the plain form — one batched GEMM for
// the scores with the causal mask as the added bias, the softmax, one batched GEMM
// for the output — takes 7.9 ms: its GEMMs are bf16's.
// The softmax runs on the scores in their own dtype: ATen's CPU kernel for bfloat16
// and float16 computes in float32 and rounds once, so its weights equal those of a
// float32 softmax rounded to bfloat16 (checked bit for bit at this block's shape),
// without the two casts of the (B·heads, T, S) matrix forward and two backward that
// a float32 softmax costs; CPU autocast leaves softmax in its input's dtype. This
// function's forward and backward at that shape took 11.0–15.5 ms against 20.1–33.3
// with the float32 softmax (the wheel's Python, 2026-12-03).
// With dropout on the CPU the plain form runs in float32 too: ATen's CPU flash kernel
// takes no dropout, and its fallback drops the (B·heads, T, S) weights with ATen's
// dropout, a Bernoulli draw an element (kiln::dropout is 11–26× faster, docs/ops.md).
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout_p,
                     bool causal) {
  const bool autocast = at::autocast::is_autocast_enabled(at::kCPU);
  if (!q.is_cpu() || (!autocast && dropout_p == 0.0))
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p, causal);
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), s = k.size(2), d = q.size(3);
  const auto dtype = autocast ? at::autocast::get_autocast_dtype(at::kCPU) : q.scalar_type();
  auto bias = at::zeros({t, s}, q.options().dtype(dtype));  // (T, S): −inf where a key is later
  if (causal) bias.masked_fill_(at::ones({t, s}, q.options().dtype(at::kBool)).triu(s - t + 1), -INFINITY);
  const auto scores = at::baddbmm(bias.expand({b * h, t, s}), q.reshape({b * h, t, d}),
                                  k.reshape({b * h, s, d}).transpose(1, 2), /*beta=*/1.0,
                                  /*alpha=*/1.0 / std::sqrt(static_cast<double>(d)));  // (B·heads, T, S)
  auto weights = at::softmax(scores, -1);  // in dtype, float32 inside (above)
  weights = kiln::ops::random_dropout(weights, dropout_p, dropout_p > 0.0);
  return at::bmm(weights, v.reshape({b * h, s, d}).to(dtype)).view({b, h, t, d});
}

// Whether a block's attention runs kiln's fused kernel (kiln::causal_attention,
// docs/ops.md) on qkv (B·T, 3C), unless KILN_CPU_ATTENTION=composite: on the CPU under
// bfloat16 autocast, where the CPU has AVX512-BF16 and no AMX (with AMX oneDNN's
// products in the composite may well be the faster: not measured), and where it has
// neither but bf16 products run as float32 ones (ops::linear_reduced_in_float32()): the
// kernel's products are float loops there, and still beat the composite's emulated
// bf16 batched GEMMs (the character GPT in bf16 on the Intel Xeon model 207, 30 steps
// alternated: 101.9 / 89.8 against 84.7 / 82.6 samples/s, the same loss to six digits,
// docs/models.md); and on a float32 qkv without autocast, in kiln's
// AVX2 and AVX-512 builds, where it runs 1.6x ATen's CPU flash attention (AVX-512;
// 1.1x AVX2's) and takes dropout, which ATen's does not (docs/ops.md). The caller
// checks what the kernel does not do (a KV cache); dropout on the attention weights it
// does.
bool fused_attention_applies(const at::Tensor& qkv) {
  static const bool allowed = util::env_switch("KILN_CPU_ATTENTION", {"auto", "composite"}) == 0;
  static const bool bf16 = (kiln::ops::cpu_has_avx512_bf16() &&
                            kiln::ops::cpu_bf16_matmul() != kiln::ops::CpuBf16Matmul::kMatrixUnits) ||
                           (kiln::ops::cpu_bf16_matmul() == kiln::ops::CpuBf16Matmul::kEmulated &&
                            kiln::ops::linear_reduced_in_float32());
  static const bool f32 = kiln::ops::cpu_capability() >= kiln::ops::CpuCapability::kAvx2;
  if (!allowed || !qkv.is_cpu()) return false;
  if (at::autocast::is_autocast_enabled(at::kCPU))
    return bf16 && at::autocast::get_autocast_dtype(at::kCPU) == at::kBFloat16;
  return f32 && qkv.scalar_type() == at::kFloat;
}

// The composite attention of qkv (B·T, 3C) → (B·T, C): q, k, v split into heads,
// attention() above, the heads merged back; with a cache, the T positions follow the
// cache->length earlier ones whose keys and values it holds (layer `layer`'s slot, of
// `block` positions).
at::Tensor attention_of(const at::Tensor& qkv_rows, int64_t b, int64_t t, int64_t heads, double p,
                        KvCache* cache, size_t layer, int64_t block) {
  const int64_t c = qkv_rows.size(1) / 3, d = c / heads;
  // (B·T, 3C) → (3, B, heads, T, d)
  const auto qkv = qkv_rows.view({b, t, 3, heads, d}).permute({2, 0, 3, 1, 4});
  // unbind, not three selects: its backward stacks the three gradients in one pass,
  // where each select's backward fills a zero (3, B, heads, T, d) tensor for its own
  // gradient and autograd then adds the three.
  const auto parts = qkv.unbind(0);
  auto q = parts[0], k = parts[1], v = parts[2];  // (B, heads, T, d)
  bool causal = true;
  if (cache) {
    if (cache->keys.size() <= layer) {
      cache->keys.push_back(at::empty({b, heads, block, d}, k.options()));
      cache->values.push_back(at::empty({b, heads, block, d}, v.options()));
    }
    const int64_t past = cache->length;
    cache->keys[layer].narrow(2, past, t).copy_(k);
    cache->values[layer].narrow(2, past, t).copy_(v);
    k = cache->keys[layer].narrow(2, 0, past + t);    // (B, heads, past + T, d)
    v = cache->values[layer].narrow(2, 0, past + t);
    causal = past == 0 && t > 1;  // one new query sees every position held
  }
  auto a = attention(q, k, v, p, causal);  // (B, heads, T, d)
  return a.transpose(1, 2).reshape({b * t, c});
}

// One pre-norm block: x + attn(norm1(x)), then x + mlp(norm2(x)).
class GptBlockImpl : public torch::nn::Cloneable<GptBlockImpl> {
 public:
  explicit GptBlockImpl(const GptOptions& o) : options(o) { reset(); }

  void reset() override {
    const int64_t c = options.width();
    norm1 = register_module("norm1", Norm(options.norm(), c));
    attn = register_module("attn", Linear(c, 3 * c));  // q, k, v of every head
    proj = register_module("proj", Linear(c, c));
    norm2 = register_module("norm2", Norm(options.norm(), c));
    fc = register_module("fc", Linear(c, options.mlp_ratio() * c));
    out = register_module("out", Linear(options.mlp_ratio() * c, c));
  }

  // x: (B, T, C) → (B, T, C). With a cache, the T positions follow cache->length
  // earlier ones whose keys and values it holds (layer `layer`'s slot).
  at::Tensor forward(const at::Tensor& x, KvCache* cache = nullptr, size_t layer = 0) {
    const int64_t b = x.size(0), t = x.size(1), c = x.size(2);
    const int64_t heads = options.heads();
    const double p = is_training() ? options.dropout() : 0.0;
    const auto qkv_rows = traced(*attn, kiln::ops::linear(norm1->forward(x).reshape({b * t, c}),
                                                          attn->weight, bias_of(*attn)));  // (B·T, 3C)
    at::Tensor a;  // (B·T, C)
    if (!cache && fused_attention_applies(qkv_rows)) {
      // Dropout on the weights inside the kernel, with the composite form's mask for the
      // same seed (the seed is drawn as the composite's random_dropout draws it).
      const int64_t seed = p > 0.0 ? kiln::ops::dropout_seed() : 0;
      a = kiln::ops::causal_attention(qkv_rows.view({b, t, 3 * c}), heads, p, seed).view({b * t, c});
    } else {
      a = attention_of(qkv_rows, b, t, heads, p, cache, layer, options.block_size());
    }
    a = kiln::ops::random_dropout(proj->forward(a), p, is_training()).view({b, t, c});
    auto y = kiln::ops::scaled_add(a, x, 1.0);  // the residual stream
    auto m = traced(*fc, kiln::ops::linear_gelu(norm2->forward(y).reshape({b * t, c}), fc->weight, bias_of(*fc)));
    m = kiln::ops::random_dropout(out->forward(m), p, is_training()).view({b, t, c});
    return traced(*this, kiln::ops::scaled_add(m, y, 1.0));
  }

  void pretty_print(std::ostream& stream) const override { stream << "kiln::nn::GptBlock"; }

  GptOptions options;
  Norm norm1{nullptr}, norm2{nullptr};
  Linear attn{nullptr}, proj{nullptr}, fc{nullptr}, out{nullptr};
};
TORCH_MODULE(GptBlock);

}  // namespace

const std::vector<std::string>& gpt_norms() {
  static const std::vector<std::string> names = {"layernorm", "rmsnorm"};
  return names;
}

void NormImpl::reset() {
  TORCH_CHECK(kind == "layernorm" || kind == "rmsnorm", "Norm: expected layernorm or rmsnorm, got \"",
              kind, "\"");
  weight = register_parameter("weight", at::ones({width}));
  if (kind == "layernorm") bias = register_parameter("bias", at::zeros({width}));
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  if (kind == "rmsnorm") return traced(*this, at::rms_norm(x, {width}, weight, kNormEps));
  // Under CPU autocast to a half type a float32 stream is normalised straight into that
  // type by kiln's layer norm: every norm here feeds a product, which would cast it
  // (one pass less each way, and half the bytes written and read back).
  if (x.is_cpu() && x.scalar_type() == at::kFloat && at::autocast::is_autocast_enabled(at::kCPU)) {
    const auto low = at::autocast::get_autocast_dtype(at::kCPU);
    if (low == at::kBFloat16 || low == at::kHalf)
      return traced(*this, kiln::ops::layer_norm(x, weight, bias, kNormEps, low));
  }
  return traced(*this, at::layer_norm(x, {width}, weight, bias, kNormEps));
}

void NormImpl::pretty_print(std::ostream& stream) const {
  stream << "kiln::nn::Norm(" << kind << ", " << width << ")";
}

GptImpl::GptImpl(GptOptions options_) : options(std::move(options_)) {
  TORCH_CHECK(options.vocab_size() > 0, "Gpt: vocab_size: expected > 0, got ", options.vocab_size());
  TORCH_CHECK(options.block_size() > 0, "Gpt: block_size: expected > 0, got ", options.block_size());
  TORCH_CHECK(options.layers() >= 1, "Gpt: layers: expected >= 1, got ", options.layers());
  TORCH_CHECK(options.heads() >= 1 && options.width() >= 1 && options.width() % options.heads() == 0,
              "Gpt: width: expected a positive multiple of heads (", options.heads(), "), got ",
              options.width());
  TORCH_CHECK(options.mlp_ratio() >= 1, "Gpt: mlp_ratio: expected >= 1, got ", options.mlp_ratio());
  const auto& norms = gpt_norms();
  TORCH_CHECK(std::find(norms.begin(), norms.end(), options.norm()) != norms.end(),
              "Gpt: norm: expected layernorm or rmsnorm, got \"", options.norm(), "\"");
  TORCH_CHECK(options.dropout() >= 0.0 && options.dropout() < 1.0,
              "Gpt: dropout: expected a probability in [0, 1), got ", options.dropout());
  TORCH_CHECK(options.checkpoint_every() >= 0,
              "Gpt: checkpoint_every: expected >= 0 (0 = off), got ", options.checkpoint_every());
  reset();
}

void GptImpl::reset() {
  const int64_t c = options.width();
  token_embedding_ = register_module("token_embedding", torch::nn::Embedding(options.vocab_size(), c));
  position_embedding_ = register_module("position_embedding", torch::nn::Embedding(options.block_size(), c));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < options.layers(); ++i) blocks_->push_back(GptBlock(options));
  norm_ = register_module("norm", Norm(options.norm(), c));
  if (!options.tie_embeddings())
    head_ = register_module("head", Linear(LinearOptions(c, options.vocab_size()).bias(false)));
  reset_parameters();
}

void GptImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  // The projections that write into the residual stream are scaled down by the
  // number of them (2 per block), so the stream's variance does not grow with depth.
  const double residual_std = kInitStd / std::sqrt(2.0 * static_cast<double>(options.layers()));
  token_embedding_->weight.normal_(0.0, kInitStd);
  position_embedding_->weight.normal_(0.0, kInitStd);
  for (auto& module : *blocks_) {
    auto& block = *module->as<GptBlockImpl>();
    for (auto* layer : {block.attn.get(), block.proj.get(), block.fc.get(), block.out.get()}) {
      const bool residual = layer == block.proj.get() || layer == block.out.get();
      layer->weight.normal_(0.0, residual ? residual_std : kInitStd);
      layer->bias.zero_();
    }
  }
  if (head_) head_->weight.normal_(0.0, kInitStd);
}

at::Tensor GptImpl::embed(const torch::Tensor& tokens, int64_t first_position) {
  const auto positions = at::arange(first_position, first_position + tokens.size(1),
                                    tokens.options().dtype(at::kLong));
  return traced(*token_embedding_, token_embedding_->forward(tokens)) +
         traced(*position_embedding_, position_embedding_->forward(positions));  // (B, T, C)
}

at::Tensor GptImpl::head(const torch::Tensor& x) {
  const auto& w = head_ ? head_->weight : token_embedding_->weight;  // (V, C): tied or its own
  const auto logits = kiln::ops::linear(norm_->forward(x), w, std::nullopt);
  return head_ ? traced(*head_, logits) : logits;
}

torch::Tensor GptImpl::forward(torch::Tensor tokens) {
  TORCH_CHECK(tokens.dim() == 2, "Gpt: expected tokens (B, T), got ", tokens.sizes());
  const int64_t b = tokens.size(0), t = tokens.size(1), c = options.width();
  TORCH_CHECK(t >= 1 && t <= options.block_size(), "Gpt: expected 1..", options.block_size(),
              " positions (block_size), got ", t);
  auto x = kiln::ops::random_dropout(embed(tokens, 0), options.dropout(), is_training());  // (B, T, C)
  x = checkpoint_segments(options.layers(), options.checkpoint_every(), x,
                          [blocks = blocks_](int64_t begin, int64_t end, const at::Tensor& h) mutable {
                            at::Tensor y = h;
                            for (int64_t i = begin; i < end; ++i) y = blocks[i]->as<GptBlockImpl>()->forward(y);
                            return y;
                          });
  return traced(*this, head(x.reshape({b * t, c})).view({b, t, options.vocab_size()}));
}

torch::Tensor GptImpl::decode(const torch::Tensor& tokens, KvCache& cache) {
  torch::NoGradGuard no_grad;
  TORCH_CHECK(!is_training(), "Gpt::decode: expected eval mode");
  TORCH_CHECK(tokens.dim() == 2, "Gpt::decode: expected tokens (B, T), got ", tokens.sizes());
  const int64_t t = tokens.size(1);
  TORCH_CHECK(cache.length == 0 || t == 1, "Gpt::decode: a filled cache takes one token a call, got ", t);
  TORCH_CHECK(cache.length + t <= options.block_size(), "Gpt::decode: ", cache.length, " + ", t,
              " positions pass block_size ", options.block_size());
  auto x = embed(tokens, cache.length);  // (B, T, C)
  for (size_t i = 0; i < blocks_->size(); ++i) x = blocks_[i]->as<GptBlockImpl>()->forward(x, &cache, i);
  cache.length += t;
  return head(x.select(1, t - 1));  // (B, V): only the last position predicts
}

void GptImpl::pretty_print(std::ostream& stream) const {
  stream << "kiln::nn::Gpt(vocab=" << options.vocab_size() << ", block=" << options.block_size()
         << ", layers=" << options.layers() << ", width=" << options.width() << ", heads="
         << options.heads() << ", norm=" << options.norm() << ", dropout=" << options.dropout()
         << (options.tie_embeddings() ? ", tied" : "")
         << (options.checkpoint_every() ? c10::str(", checkpoint_every=", options.checkpoint_every()) : "")
         << ")";
}

std::vector<std::string> GptImpl::head_parameters() const {
  return parameter_names_of(*this, head_ ? static_cast<const torch::nn::Module&>(*head_)
                                         : static_cast<const torch::nn::Module&>(*token_embedding_));
}

}  // namespace kiln::nn
