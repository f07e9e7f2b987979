// kiln::nn::DynamicMlp: construction, initialisation, the depth of each call (drawn
// per training step from the run's seed) and the forward pass over the layers a call
// runs, plainly or as checkpointed segments.
#include "nn/dynamic_mlp.h"

#include <torch/nn/init.h>

#include <algorithm>
#include <cmath>

#include "data/loader.h"
#include "nn/checkpoint.h"
#include "nn/trace.h"

namespace kiln::nn {

const std::vector<std::string>& depth_samplings() {
  static const std::vector<std::string> names = {"fixed", "uniform"};
  return names;
}

DynamicMlpImpl::DynamicMlpImpl(DynamicMlpOptions options_) : options(std::move(options_)) {
  TORCH_CHECK(options.in_features() > 0, "DynamicMlp: in_features: expected > 0, got ",
              options.in_features());
  TORCH_CHECK(options.out_features() > 0, "DynamicMlp: out_features: expected > 0, got ",
              options.out_features());
  TORCH_CHECK(options.max_depth() >= 1, "DynamicMlp: max_depth: expected ≥ 1, got ", options.max_depth());
  TORCH_CHECK(options.min_depth() >= 0 && options.min_depth() <= options.max_depth(),
              "DynamicMlp: min_depth: expected 0..max_depth (", options.max_depth(), "), got ",
              options.min_depth());
  TORCH_CHECK(options.width() > 0, "DynamicMlp: width: expected > 0, got ", options.width());
  const auto& samplings = depth_samplings();
  TORCH_CHECK(std::find(samplings.begin(), samplings.end(), options.depth_sampling()) != samplings.end(),
              "DynamicMlp: depth_sampling: expected one of fixed, uniform, got \"",
              options.depth_sampling(), "\"");
  Activation(options.activation(), "DynamicMlp");  // checks it
  TORCH_CHECK(options.dropout() >= 0.0 && options.dropout() < 1.0,
              "DynamicMlp: dropout: expected a probability in [0, 1), got ", options.dropout());
  TORCH_CHECK(options.checkpoint_every() >= 0,
              "DynamicMlp: checkpoint_every: expected ≥ 0 (0 = off), got ", options.checkpoint_every());
  reset();
}

void DynamicMlpImpl::reset() {
  input_ = register_module("input", Linear(options.in_features(), options.width()));
  layers_ = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < options.max_depth(); ++i)
    layers_->push_back(Linear(options.width(), options.width()));
  output_ = register_module("output", Linear(options.width(), options.out_features()));
  reset_parameters();
}

void DynamicMlpImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  auto he = [](LinearImpl& layer, double gain) {
    torch::nn::init::kaiming_normal_(layer.weight, 0.0, torch::kFanIn, torch::kReLU);
    layer.weight.mul_(gain);
    torch::nn::init::zeros_(layer.bias);
  };
  he(*input_, 1.0);
  // x + f(x) with f He-initialised keeps x's second moment and adds f's, as large:
  // it doubles at every layer (256× after 8). Scaled by 1/√L, each adds a 1/L share.
  const double branch = options.residual() ? 1.0 / std::sqrt(static_cast<double>(options.max_depth())) : 1.0;
  for (auto& layer : *layers_) he(*layer->as<LinearImpl>(), branch);
  output_->reset_parameters();  // the head: torch's default
}

void DynamicMlpImpl::begin_step(uint64_t seed, int64_t step) {
  if (options.depth_sampling() != "uniform") return;
  // A stream of its own ("depth" salts the seed), apart from the loader's and the
  // augmentation's draws from the same train.seed.
  constexpr uint64_t kDepthStream = 0x6465707468ULL;
  const uint64_t draw = data::mix_seed(data::mix_seed(seed ^ kDepthStream) ^
                                       data::mix_seed(static_cast<uint64_t>(step)));
  const auto range = static_cast<uint64_t>(options.max_depth() - options.min_depth() + 1);
  drawn_ = options.min_depth() + static_cast<int64_t>(draw % range);
}

void DynamicMlpImpl::force_depth(std::optional<int64_t> depth) {
  TORCH_CHECK(!depth || (*depth >= 0 && *depth <= options.max_depth()),
              "DynamicMlp: force_depth: expected 0..", options.max_depth(), ", got ", *depth);
  forced_ = depth;
}

int64_t DynamicMlpImpl::depth() const {
  if (forced_) return *forced_;
  if (is_training() && drawn_) return *drawn_;
  return options.max_depth();
}

torch::Tensor DynamicMlpImpl::forward(torch::Tensor x) { return forward_at(std::move(x), depth()); }

torch::Tensor DynamicMlpImpl::forward_at(torch::Tensor x, int64_t depth) {
  TORCH_CHECK(depth >= 0 && depth <= options.max_depth(), "DynamicMlp: depth: expected 0..",
              options.max_depth(), ", got ", depth);
  const LayerRule rule{Activation(options.activation(), "DynamicMlp"), options.dropout(),
                       is_training(), options.residual()};
  x = rule(*input_, x.flatten(1));  // (B, width)
  x = checkpoint_segments(depth, options.checkpoint_every(), x,
                          [layers = layers_, rule](int64_t begin, int64_t end, const torch::Tensor& t) {
                            return rule.run(layers, begin, end, t);
                          });  // (B, width)
  return traced(*this, output_->forward(x));  // (B, out_features)
}

void DynamicMlpImpl::pretty_print(std::ostream& stream) const {
  stream << "kiln::nn::DynamicMlp(in=" << options.in_features() << ", depth=" << options.min_depth()
         << ".." << options.max_depth() << " " << options.depth_sampling() << ", width="
         << options.width() << ", out=" << options.out_features() << ", activation="
         << options.activation() << (options.residual() ? ", residual" : "") << ", dropout="
         << options.dropout() << ", checkpoint_every=" << options.checkpoint_every() << ")";
}

std::vector<std::string> DynamicMlpImpl::head_parameters() const {
  return parameter_names_of(*this, *output_);
}

}  // namespace kiln::nn
