// kiln::nn::DeepMlp: construction, initialisation, and the forward pass that runs
// the hidden layers plainly or as checkpointed segments.
#include "nn/deep_mlp.h"

#include <torch/nn/functional/dropout.h>
#include <torch/nn/init.h>

#include <algorithm>

#include "nn/checkpoint.h"
#include "ops/ops.h"

namespace kiln::nn {
namespace {

// What one layer applies after it: everything the segment functions need, by value,
// so a checkpointed segment does not depend on the module outliving backward.
struct LayerRule {
  bool gelu;
  double dropout;
  bool training;
};

// Linear → activation → dropout. x: (B, in) → (B, out)
torch::Tensor layer_forward(LinearImpl& layer, const torch::Tensor& x, const LayerRule& rule) {
  torch::Tensor y;
  if (rule.gelu) {
    const auto& b = layer.bias;
    y = kiln::ops::linear_gelu(x, layer.weight, b.defined() ? std::optional<torch::Tensor>(b) : std::nullopt);
  } else {
    y = kiln::ops::relu(layer.forward(x));
  }
  if (rule.dropout > 0.0)
    y = torch::nn::functional::dropout(
        y, torch::nn::functional::DropoutFuncOptions().p(rule.dropout).training(rule.training));
  return y;
}

// Hidden layers [begin, end). x: (B, width) → (B, width)
torch::Tensor run_layers(torch::nn::ModuleList layers, int64_t begin, int64_t end,
                         torch::Tensor x, const LayerRule& rule) {
  for (int64_t i = begin; i < end; ++i) x = layer_forward(*layers[i]->as<LinearImpl>(), x, rule);
  return x;
}

}  // namespace

const std::vector<std::string>& deep_mlp_activations() {
  static const std::vector<std::string> names = {"relu", "gelu"};
  return names;
}

DeepMlpImpl::DeepMlpImpl(DeepMlpOptions options_) : options(std::move(options_)) {
  TORCH_CHECK(options.in_features() > 0, "DeepMlp: in_features: expected > 0, got ",
              options.in_features());
  TORCH_CHECK(options.out_features() > 0, "DeepMlp: out_features: expected > 0, got ",
              options.out_features());
  TORCH_CHECK(options.layers() >= 0, "DeepMlp: layers: expected ≥ 0, got ", options.layers());
  TORCH_CHECK(options.width() > 0, "DeepMlp: width: expected > 0, got ", options.width());
  const auto& names = deep_mlp_activations();
  if (std::find(names.begin(), names.end(), options.activation()) == names.end()) {
    std::string valid;
    for (const auto& name : names) valid += (valid.empty() ? "" : ", ") + name;
    TORCH_CHECK(false, "DeepMlp: activation: expected one of ", valid, ", got \"", options.activation(), "\"");
  }
  TORCH_CHECK(options.dropout() >= 0.0 && options.dropout() < 1.0,
              "DeepMlp: dropout: expected a probability in [0, 1), got ", options.dropout());
  TORCH_CHECK(options.checkpoint_every() >= 0,
              "DeepMlp: checkpoint_every: expected ≥ 0 (0 = off), got ", options.checkpoint_every());
  reset();
}

void DeepMlpImpl::reset() {
  input_ = register_module("input", Linear(options.in_features(), options.width()));
  layers_ = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < options.layers(); ++i)
    layers_->push_back(Linear(options.width(), options.width()));
  output_ = register_module("output", Linear(options.width(), options.out_features()));
  reset_parameters();
}

void DeepMlpImpl::reset_parameters() {
  // He (Kaiming) normal weights, variance 2/fan_in, and zero biases for every layer
  // an activation follows. torch's Linear default (variance 1/(3·fan_in)) shrinks
  // the signal at each relu layer: after 50 of them the output varies over a batch
  // by ~1e-7 of its size, i.e. no longer depends on the input, and nothing trains.
  auto he = [](LinearImpl& layer) {
    torch::nn::init::kaiming_normal_(layer.weight, 0.0, torch::kFanIn, torch::kReLU);
    if (layer.bias.defined()) torch::nn::init::zeros_(layer.bias);
  };
  he(*input_);
  for (auto& layer : *layers_) he(*layer->as<LinearImpl>());
  output_->reset_parameters();  // the head: torch's default
}

torch::Tensor DeepMlpImpl::forward(torch::Tensor x) {
  const LayerRule rule{options.activation() == "gelu", options.dropout(), is_training()};
  x = layer_forward(*input_, x.flatten(1), rule);  // (B, width)
  const int64_t n = options.layers();
  const int64_t every = options.checkpoint_every();
  if (every == 0) {
    x = run_layers(layers_, 0, n, x, rule);
  } else {
    for (int64_t begin = 0; begin < n; begin += every) {
      const int64_t end = std::min(n, begin + every);
      x = checkpoint([layers = layers_, begin, end, rule](const torch::Tensor& t) {
        return run_layers(layers, begin, end, t, rule);
      }, x);
    }
  }
  return output_->forward(x);  // (B, out_features)
}

void DeepMlpImpl::pretty_print(std::ostream& stream) const {
  stream << "kiln::nn::DeepMlp(in=" << options.in_features() << ", layers=" << options.layers()
         << ", width=" << options.width() << ", out=" << options.out_features()
         << ", activation=" << options.activation() << ", dropout=" << options.dropout()
         << ", checkpoint_every=" << options.checkpoint_every() << ")";
}

std::vector<std::string> DeepMlpImpl::head_parameters() const {
  return parameter_names_of(*this, *output_);
}

}  // namespace kiln::nn
