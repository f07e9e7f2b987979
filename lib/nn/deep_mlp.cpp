// kiln::nn::DeepMlp: construction, initialisation, and the forward pass that runs
// the hidden layers plainly or as checkpointed segments.
#include "nn/deep_mlp.h"

#include <torch/nn/init.h>

#include "nn/checkpoint.h"
#include "nn/trace.h"

namespace kiln::nn {

DeepMlpImpl::DeepMlpImpl(DeepMlpOptions options_) : options(std::move(options_)) {
  TORCH_CHECK(options.in_features() > 0, "DeepMlp: in_features: expected > 0, got ",
              options.in_features());
  TORCH_CHECK(options.out_features() > 0, "DeepMlp: out_features: expected > 0, got ",
              options.out_features());
  TORCH_CHECK(options.layers() >= 0, "DeepMlp: layers: expected ≥ 0, got ", options.layers());
  TORCH_CHECK(options.width() > 0, "DeepMlp: width: expected > 0, got ", options.width());
  Activation(options.activation(), "DeepMlp");  // checks it
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
  const LayerRule rule{Activation(options.activation(), "DeepMlp"), options.dropout(), is_training()};
  x = rule(*input_, x.flatten(1));  // (B, width)
  x = checkpoint_segments(options.layers(), options.checkpoint_every(), x,
                          [layers = layers_, rule](int64_t begin, int64_t end, const torch::Tensor& t) {
                            return rule.run(layers, begin, end, t);
                          });  // (B, width)
  return traced(*this, output_->forward(x));  // (B, out_features)
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
