// Builds the model a config names ("mlp", "deep_mlp", …), so the trainer holds any
// of them the same way: a torch::nn::AnyModule mapping (B, …) to logits (B, C).
#pragma once
#include <torch/nn/modules/container/any.h>

#include <string>
#include <vector>

#include "nn/convnet.h"
#include "nn/deep_mlp.h"
#include "nn/dynamic_mlp.h"
#include "nn/gpt.h"
#include "nn/mlp.h"

namespace kiln::nn {

struct ModelSpec {
  /// One of model_names().
  std::string name = "mlp";
  MlpOptions mlp{784, {512, 256}, 10};
  DeepMlpOptions deep_mlp{784, 10};
  DynamicMlpOptions dynamic_mlp{784, 10};
  ConvNetOptions convnet{{1, 28, 28}, 10};
  GptOptions gpt{256, 128};
};

/// Whether model `name` reads token ids and predicts the next token at every
/// position (gpt), so the data gives it sequences (data::DataOptions::sequence).
bool takes_tokens(const std::string& name);

/// Sizes the models' input and output to a data set: one example's `input_shape`
/// (the ConvNet's image), `in_features` values per example as the MLPs see them
/// (flattened) and `outputs` logits or regression targets; `tokens`: the examples are
/// token ids (text for a sequence model: input_shape {block_size}, outputs the
/// vocabulary). A model the data cannot feed (a ConvNet on a table, a GPT on
/// anything but tokens) throws kiln::InputError.
/// Example: kiln::nn::fit_to_data(spec, {1, 28, 28}, 784, 10);
void fit_to_data(ModelSpec& spec, const std::vector<int64_t>& input_shape, int64_t in_features,
                 int64_t outputs, bool tokens = false);

/// The model names make_model knows, in order: mlp, deep_mlp, dynamic_mlp, convnet, gpt.
const std::vector<std::string>& model_names();

/// Builds spec.name; an unknown name throws kiln::InputError listing the valid ones.
/// Example: auto model = kiln::nn::make_model(spec); auto logits = model.forward(x);
torch::nn::AnyModule make_model(const ModelSpec& spec);

/// The names of the output head's parameters that `model` gives (nn::OutputHead),
/// as its named_parameters() spells them; empty for a module that names no head.
/// Example: auto head = kiln::nn::head_parameters(*model.ptr());  // {"layers.2.weight", "layers.2.bias"}
std::vector<std::string> head_parameters(const torch::nn::Module& model);

}  // namespace kiln::nn
