// kiln::nn::Gpt: a decoder-only transformer for next-token prediction (GPT-2's
// layout): token and position embeddings, pre-norm blocks of causal self-attention
// and an MLP, a final norm and a head tied to the token embedding. Attention runs
// through at::scaled_dot_product_attention (flash / memory-efficient kernels on
// CUDA); the projections, the fused GELU layer, the residual adds and the loss are
// kiln's ops.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <vector>

#include "nn/head.h"
#include "nn/linear.h"

namespace kiln::nn {

struct GptOptions {
  GptOptions(int64_t vocab_size, int64_t block_size) : vocab_size_(vocab_size), block_size_(block_size) {}
  TORCH_ARG(int64_t, vocab_size);
  /// The longest context: positions 0..block_size−1 have embeddings.
  TORCH_ARG(int64_t, block_size);
  TORCH_ARG(int64_t, layers) = 4;
  /// The model width; a multiple of heads.
  TORCH_ARG(int64_t, width) = 192;
  TORCH_ARG(int64_t, heads) = 6;
  /// "layernorm" or "rmsnorm", before each sub-layer and before the head.
  TORCH_ARG(std::string, norm) = "layernorm";
  /// Hidden width of each block's MLP as a multiple of width.
  TORCH_ARG(int64_t, mlp_ratio) = 4;
  /// Dropout on the embeddings, the attention weights and each residual branch.
  TORCH_ARG(double, dropout) = 0.0;
  /// The output head is the token embedding's matrix (GPT-2); false: its own.
  TORCH_ARG(bool, tie_embeddings) = true;
  /// Blocks per activation-checkpointed segment (kiln::nn::checkpoint); 0 keeps
  /// every activation.
  TORCH_ARG(int64_t, checkpoint_every) = 0;
};

/// The names GptOptions::norm accepts.
const std::vector<std::string>& gpt_norms();

/// LayerNorm (weight and bias) or RMSNorm (weight) over the last dimension, eps 1e-5.
/// Example: kiln::nn::Norm n("rmsnorm", 192); auto y = n(x);  // x: (…, 192)
class NormImpl : public torch::nn::Cloneable<NormImpl> {
 public:
  NormImpl(std::string kind, int64_t width) : kind(std::move(kind)), width(width) { reset(); }
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);
  void pretty_print(std::ostream& stream) const override;

  std::string kind;
  int64_t width;
  torch::Tensor weight, bias;  // (width); bias undefined for rmsnorm
};
TORCH_MODULE(Norm);

/// Keys and values of every block for the positions seen so far: generation feeds
/// one new token per call instead of the whole context again. Example: see Gpt::decode.
struct KvCache {
  std::vector<at::Tensor> keys, values;  // per block: (B, heads, block_size, head_dim)
  int64_t length = 0;                    // positions held
};

/// Parameter names (stable for checkpoints): token_embedding.weight,
/// position_embedding.weight, blocks.i.{norm1,attn,proj,norm2,fc,out}.*, norm.*,
/// and head.weight when the embeddings are not tied.
/// Initialised as GPT-2: weights normal(0, 0.02), the projections into the residual
/// stream (proj, out) normal(0, 0.02/√(2·layers)), biases 0, norms 1.
/// Example: kiln::nn::Gpt gpt(kiln::nn::GptOptions(113, 128)); auto logits = gpt(tokens);
class GptImpl : public torch::nn::Cloneable<GptImpl>, public OutputHead {
 public:
  explicit GptImpl(GptOptions options);
  void reset() override;
  void reset_parameters();
  /// tokens: (B, T) int64, T ≤ block_size → logits (B, T, vocab_size): position t
  /// predicts token t+1 from tokens 0..t.
  torch::Tensor forward(torch::Tensor tokens);
  /// Generation: tokens (B, T) continue the positions `cache` holds (an empty cache
  /// with T tokens, or a filled one with T = 1); returns the logits of the last
  /// position, (B, vocab_size), and appends the new keys and values to the cache.
  /// cache.length + T must not pass block_size. Eval mode; no autograd.
  /// Example: KvCache c; auto l = gpt->decode(prompt, c); l = gpt->decode(next, c);
  torch::Tensor decode(const torch::Tensor& tokens, KvCache& cache);
  void pretty_print(std::ostream& stream) const override;
  /// The head's weight: token_embedding.weight when tied, else head.weight.
  std::vector<std::string> head_parameters() const override;

  GptOptions options;

 private:
  /// Token plus position embeddings of tokens (B, T) at positions first_position… → (B, T, C).
  at::Tensor embed(const torch::Tensor& tokens, int64_t first_position);
  /// The final norm and the head: (…, C) → logits (…, V).
  at::Tensor head(const torch::Tensor& x);

  torch::nn::Embedding token_embedding_{nullptr}, position_embedding_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
  Norm norm_{nullptr};
  Linear head_{nullptr};
};
TORCH_MODULE(Gpt);

}  // namespace kiln::nn
