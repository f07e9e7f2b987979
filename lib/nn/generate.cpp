// generate(): the sliding context, the two ways of computing the next logits, and
// the choice of the next token.
#include "nn/generate.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

namespace kiln::nn {
namespace {

// The next token from one position's logits (V), on the CPU.
int64_t pick(at::Tensor logits, const GenerateOptions& o, at::Generator& gen) {
  logits = logits.to(at::kCPU, at::kFloat);
  if (o.temperature() == 0.0) return logits.argmax().item<int64_t>();
  // The largest logit shifted to 0 before the division: with a temperature so small
  // that logits / T overflows (1e-45), the others go to -inf instead of inf − inf = NaN,
  // and the largest stay exactly 0 even where T underflows to 0 in float.
  const auto top = logits.max();
  logits = at::where(logits == top, at::zeros_like(logits), (logits - top) / o.temperature());
  if (o.top_k() > 0 && o.top_k() < logits.size(0)) {
    const auto kth = std::get<0>(logits.topk(o.top_k())).min();
    logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
  }
  return at::multinomial(logits.softmax(0), 1, /*replacement=*/false, gen).item<int64_t>();
}

}  // namespace

at::Tensor generate(GptImpl& model, const at::Tensor& prompt, const GenerateOptions& o) {
  TORCH_CHECK(prompt.dim() == 1 && prompt.numel() >= 1 && prompt.scalar_type() == at::kLong,
              "generate: expected a 1-D int64 prompt of at least one token, got ", prompt.sizes());
  TORCH_CHECK(o.tokens() >= 0 && o.temperature() >= 0.0 && o.top_k() >= 0,
              "generate: expected tokens, temperature and top_k >= 0");
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const auto device = model.parameters().front().device();
  const int64_t block = model.options.block_size();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed());
  std::vector<int64_t> ids(prompt.data_ptr<int64_t>(), prompt.data_ptr<int64_t>() + prompt.numel());
  const auto tokens_of = [&](size_t begin, size_t end) {  // (1, end − begin) on the model's device
    return at::tensor(std::vector<int64_t>(ids.begin() + begin, ids.begin() + end), at::kLong)
        .view({1, -1})
        .to(device);
  };
  KvCache cache;
  size_t begin = 0;
  for (int64_t i = 0; i < o.tokens(); ++i) {
    bool slid = false;
    if (static_cast<int64_t>(ids.size() - begin) > block) {
      begin = ids.size() - static_cast<size_t>(std::max<int64_t>(1, block / 2));
      slid = true;
    }
    at::Tensor logits;  // (V)
    if (!o.cache()) {
      logits = model.forward(tokens_of(begin, ids.size()))[0][-1];
    } else if (cache.length == 0 || slid) {
      cache = KvCache();
      logits = model.decode(tokens_of(begin, ids.size()), cache)[0];
    } else {
      logits = model.decode(tokens_of(ids.size() - 1, ids.size()), cache)[0];
    }
    ids.push_back(pick(logits, o, gen));
    if (o.on_token() && !o.on_token()(ids.back())) break;
  }
  if (was_training) model.train();
  return at::tensor(std::vector<int64_t>(ids.begin() + prompt.numel(), ids.end()), at::kLong);
}

}  // namespace kiln::nn
