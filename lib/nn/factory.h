// Builds the model a config names ("mlp", "deep_mlp"), so the trainer holds any
// of them the same way: a torch::nn::AnyModule mapping (B, …) to logits (B, C).
#pragma once
#include <torch/nn/modules/container/any.h>

#include <string>
#include <vector>

#include "nn/deep_mlp.h"
#include "nn/mlp.h"

namespace kiln::nn {

struct ModelSpec {
  /// One of model_names().
  std::string name = "mlp";
  MlpOptions mlp{784, {512, 256}, 10};
  DeepMlpOptions deep_mlp{784, 10};
};

/// Sizes the models' input and output to a data set: `in_features` values per
/// example (its input shape, flattened) and `outputs` logits or regression targets.
/// Example: kiln::nn::fit_to_data(spec, 784, 10);
void fit_to_data(ModelSpec& spec, int64_t in_features, int64_t outputs);

/// The model names make_model knows, in order: mlp, deep_mlp.
const std::vector<std::string>& model_names();

/// Builds spec.name; an unknown name throws kiln::InputError listing the valid ones.
/// Example: auto model = kiln::nn::make_model(spec); auto logits = model.forward(x);
torch::nn::AnyModule make_model(const ModelSpec& spec);

/// The names of the output head's parameters that `model` gives (nn::OutputHead),
/// as its named_parameters() spells them; empty for a module that names no head.
/// Example: auto head = kiln::nn::head_parameters(*model.ptr());  // {"layers.2.weight", "layers.2.bias"}
std::vector<std::string> head_parameters(const torch::nn::Module& model);

}  // namespace kiln::nn
