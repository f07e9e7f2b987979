// kiln::nn::Mlp: construction, initialisation and the forward pass.
#include "nn/mlp.h"

#include "nn/trace.h"

namespace kiln::nn {

MlpImpl::MlpImpl(MlpOptions options_) : options(std::move(options_)) {
  TORCH_CHECK(options.in_features() > 0, "Mlp: in_features: expected > 0, got ",
              options.in_features());
  TORCH_CHECK(options.out_features() > 0, "Mlp: out_features: expected > 0, got ",
              options.out_features());
  for (size_t i = 0; i < options.hidden().size(); ++i)
    TORCH_CHECK(options.hidden()[i] > 0, "Mlp: hidden[", i, "]: expected > 0, got ",
                options.hidden()[i]);
  TORCH_CHECK(options.dropout() >= 0.0 && options.dropout() < 1.0,
              "Mlp: dropout: expected a probability in [0, 1), got ", options.dropout());
  Activation(options.activation(), "Mlp");  // checks it
  reset();
}

void MlpImpl::reset() {
  layers_ = register_module("layers", torch::nn::ModuleList());
  int64_t width = options.in_features();
  for (const int64_t h : options.hidden()) {
    layers_->push_back(Linear(width, h));
    width = h;
  }
  layers_->push_back(Linear(width, options.out_features()));
}

void MlpImpl::reset_parameters() {
  for (auto& layer : *layers_) layer->as<Linear>()->reset_parameters();
}

torch::Tensor MlpImpl::forward(torch::Tensor x) {
  const LayerRule rule{Activation(options.activation(), "Mlp"), options.dropout(), is_training()};
  x = x.flatten(1);  // (B, in_features)
  const size_t last = layers_->size() - 1;
  for (size_t i = 0; i < last; ++i) x = rule(*layers_[i]->as<Linear>(), x);  // (B, hidden[i])
  return traced(*this, layers_[last]->as<Linear>()->forward(x));  // (B, out_features)
}

void MlpImpl::pretty_print(std::ostream& stream) const {
  stream << "kiln::nn::Mlp(in=" << options.in_features() << ", hidden=[";
  for (size_t i = 0; i < options.hidden().size(); ++i)
    stream << (i ? ", " : "") << options.hidden()[i];
  stream << "], out=" << options.out_features() << ", activation=" << options.activation()
         << ", dropout=" << options.dropout() << ")";
}

std::vector<std::string> MlpImpl::head_parameters() const {
  return parameter_names_of(*this, *layers_->ptr(layers_->size() - 1));
}

}  // namespace kiln::nn
