// evaluate(): sums per-example losses and hits in double so the result does not
// depend on the batch size.
#include "train/evaluate.h"

#include <torch/nn/functional/loss.h>
#include <torch/torch.h>

namespace kiln::train {

EvalResult evaluate(const std::function<at::Tensor(const at::Tensor&)>& forward,
                    const at::Tensor& x, const at::Tensor& y, int64_t batch_size,
                    const at::Device& device) {
  torch::NoGradGuard no_grad;
  const int64_t n = x.size(0);
  double loss_sum = 0.0;
  int64_t hits = 0;
  for (int64_t start = 0; start < n; start += batch_size) {
    const int64_t len = std::min(batch_size, n - start);
    const auto xb = x.narrow(0, start, len).to(device);
    const auto yb = y.narrow(0, start, len).to(device);
    const auto logits = forward(xb);  // (B, C)
    loss_sum += torch::nn::functional::cross_entropy(
                    logits.to(at::kFloat), yb,
                    torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                    .item<double>();
    hits += logits.argmax(1).eq(yb).sum().item<int64_t>();
  }
  EvalResult r;
  r.examples = n;
  r.loss = n ? loss_sum / n : 0.0;
  r.accuracy = n ? static_cast<double>(hits) / n : 0.0;
  return r;
}

}  // namespace kiln::train
