// A model names its own output head (the layer that makes the logits), so code
// that treats the head apart — Muon leaves it to AdamW — asks the model instead of
// guessing from parameter names.
#pragma once
#include <torch/nn/module.h>

#include <string>
#include <vector>

namespace kiln::nn {

/// Implemented by every kiln model beside torch::nn::Module.
/// Example: for (const auto& name : net->head_parameters()) exclude.push_back(name);
class OutputHead {
 public:
  virtual ~OutputHead() = default;
  /// The names of the output head's parameters, as the model's named_parameters() spells them.
  virtual std::vector<std::string> head_parameters() const = 0;
};

/// The names in `model.named_parameters()` of the parameters of `part`, a submodule
/// of `model` (found by identity, so they follow however the model registers it).
/// Example: return parameter_names_of(*this, *output_);
std::vector<std::string> parameter_names_of(const torch::nn::Module& model,
                                            const torch::nn::Module& part);

}  // namespace kiln::nn
