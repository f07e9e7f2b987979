// Text generation with a kiln::nn::Gpt: greedy or sampled (temperature, top-k,
// seeded), with or without the key/value cache; both give the same tokens.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <functional>

#include "nn/gpt.h"

namespace kiln::nn {

struct GenerateOptions {
  /// New tokens to generate.
  TORCH_ARG(int64_t, tokens) = 200;
  /// 0 picks the most likely token (greedy); above 0 samples from softmax(logits / T).
  TORCH_ARG(double, temperature) = 1.0;
  /// Sample among the k most likely tokens only; 0 = all.
  TORCH_ARG(int64_t, top_k) = 0;
  /// Seeds the sampling (a CPU generator: the same tokens on every device).
  TORCH_ARG(uint64_t, seed) = 0;
  /// Feed one token per step against the cached keys and values (true), or the
  /// whole context again (false, the reference the cache is checked against).
  TORCH_ARG(bool, cache) = true;
  /// Called with each new token as it is chosen (kiln sample prints it then); false
  /// stops the generation there, with the tokens so far.
  TORCH_ARG(std::function<bool(int64_t)>, on_token);
};

/// Continues `prompt` (1-D int64 token ids, at least one) by options.tokens() tokens
/// (fewer when on_token stops it) and returns them (1-D int64, on the CPU), in eval mode without autograd.
/// The context is the last tokens up to the model's block_size: when it is full, it
/// slides to keep the newest block_size/2 tokens (the cache is then refilled from
/// them), so the cached and uncached paths see the same contexts.
/// Example: auto ids = kiln::nn::generate(*gpt, vocab.encode("Q: "), GenerateOptions().temperature(0.8));
at::Tensor generate(GptImpl& model, const at::Tensor& prompt, const GenerateOptions& options);

}  // namespace kiln::nn
