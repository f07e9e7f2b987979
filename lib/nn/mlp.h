// kiln::nn::Mlp: a multi-layer perceptron whose activations are kiln ops, the
// model of the default Fashion-MNIST experiment and the pattern for later modules.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <vector>

#include "nn/activation.h"
#include "nn/head.h"
#include "nn/linear.h"

namespace kiln::nn {

struct MlpOptions {
  MlpOptions(int64_t in_features, std::vector<int64_t> hidden, int64_t out_features)
      : in_features_(in_features), hidden_(std::move(hidden)), out_features_(out_features) {}
  TORCH_ARG(int64_t, in_features);
  /// Width of each hidden layer, in order; empty makes a linear model.
  TORCH_ARG(std::vector<int64_t>, hidden);
  TORCH_ARG(int64_t, out_features);
  /// Dropout probability after each hidden activation (training mode only).
  TORCH_ARG(double, dropout) = 0.0;
  /// The hidden layers' activation (relu, gelu fused into the Linear, sigmoid).
  TORCH_ARG(ActivationOptions, activation);
};

/// kiln::nn::Linear → activation (→ dropout) per hidden layer, then a linear head.
/// Layers start as torch::nn::Linear does, whatever the activation.
/// Example: kiln::nn::Mlp net(kiln::nn::MlpOptions(784, {512, 256}, 10));
class MlpImpl : public torch::nn::Cloneable<MlpImpl>, public OutputHead {
 public:
  explicit MlpImpl(MlpOptions options);
  void reset() override;
  void reset_parameters();
  /// x: (B, …) flattened to (B, in_features) → logits (B, out_features)
  torch::Tensor forward(torch::Tensor x);
  void pretty_print(std::ostream& stream) const override;
  /// The last Linear's weight and bias: "layers.<hidden().size()>.weight", ….
  std::vector<std::string> head_parameters() const override;

  MlpOptions options;

 private:
  torch::nn::ModuleList layers_{nullptr};
};
TORCH_MODULE(Mlp);

}  // namespace kiln::nn
