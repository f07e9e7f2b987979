// kiln::nn::Activation: the checks of an activation's options and the kiln ops that
// apply it.
#include "nn/activation.h"


#include <algorithm>
#include <cmath>
#include <optional>

#include "nn/trace.h"
#include "ops/ops.h"

namespace kiln::nn {

const std::vector<std::string>& activation_names() {
  static const std::vector<std::string> names = {"relu", "gelu", "sigmoid"};
  return names;
}

Activation::Activation(ActivationOptions options, const std::string& owner)
    : options_(std::move(options)) {
  const auto& names = activation_names();
  if (std::find(names.begin(), names.end(), options_.name()) == names.end()) {
    std::string valid;
    for (const auto& name : names) valid += (valid.empty() ? "" : ", ") + name;
    TORCH_CHECK(false, owner, ": activation: expected one of ", valid, ", got \"", options_.name(), "\"");
  }
  const double beta = options_.sigmoid_beta(), clip = options_.sigmoid_grad_clip();
  TORCH_CHECK(std::isfinite(beta) && beta > 0, owner,
              ": sigmoid_beta: expected a finite number > 0, got ", beta);
  TORCH_CHECK(std::isfinite(clip) && clip >= 0, owner,
              ": sigmoid_grad_clip: expected a finite number >= 0 (0 = no clamp), got ", clip);
}

torch::Tensor Activation::apply(const torch::Tensor& x) const {
  const auto& name = options_.name();
  if (name == "gelu") return kiln::ops::gelu(x);
  if (name == "sigmoid") {
    const double clip = options_.sigmoid_grad_clip();
    return kiln::ops::sigmoid(x, options_.sigmoid_beta(),
                              clip > 0 ? std::optional<double>(clip) : std::nullopt);
  }
  return kiln::ops::relu(x);
}

torch::Tensor Activation::linear_then(LinearImpl& layer, const torch::Tensor& x) const {
  const auto& name = options_.name();
  if (name == "sigmoid") return apply(layer.forward(x));
  // One op and one autograd node instead of two: GELU in cuBLASLt's epilogue on CUDA,
  // else (and ReLU everywhere) in place on the product while it is in cache.
  const auto& b = layer.bias;
  const auto bias = b.defined() ? std::optional<torch::Tensor>(b) : std::nullopt;
  return traced(layer, name == "gelu" ? kiln::ops::linear_gelu(x, layer.weight, bias)
                                      : kiln::ops::linear_relu(x, layer.weight, bias));
}

torch::Tensor LayerRule::operator()(LinearImpl& layer, const torch::Tensor& x) const {
  auto y = act.linear_then(layer, x);
  y = kiln::ops::random_dropout(y, dropout, training);  // kiln's op: a counter-based mask, none saved
  return residual && y.sizes() == x.sizes() ? kiln::ops::scaled_add(x, y, 1.0) : y;
}

torch::Tensor LayerRule::run(torch::nn::ModuleList layers, int64_t begin, int64_t end,
                             torch::Tensor x) const {
  for (int64_t i = begin; i < end; ++i) x = (*this)(*layers[i]->as<LinearImpl>(), x);
  return x;
}

std::ostream& operator<<(std::ostream& stream, const ActivationOptions& options) {
  stream << options.name();
  if (options.name() == "sigmoid") {
    stream << "(beta=" << options.sigmoid_beta();
    if (options.sigmoid_grad_clip() > 0) stream << ", grad_clip=" << options.sigmoid_grad_clip();
    stream << ")";
  }
  return stream;
}

}  // namespace kiln::nn
