// kiln::nn::DeepMlp: the source documents' memory-efficient model — a deep MLP of
// equal-width layers (50 × 1024 by default) whose layers can be grouped into
// activation-checkpointed segments (every 5 layers in the documents).
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <vector>

#include "nn/activation.h"
#include "nn/head.h"
#include "nn/linear.h"

namespace kiln::nn {

struct DeepMlpOptions {
  DeepMlpOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  TORCH_ARG(int64_t, in_features);
  TORCH_ARG(int64_t, out_features);
  /// Number of hidden width × width layers between the input and output projections.
  TORCH_ARG(int64_t, layers) = 50;
  TORCH_ARG(int64_t, width) = 1024;
  /// "relu" (kiln::ops::relu after kiln::ops::linear), "gelu" (kiln::ops::linear_gelu,
  /// the GELU fused into the matrix multiply on CUDA) or "sigmoid" (kiln::ops::sigmoid).
  TORCH_ARG(ActivationOptions, activation);
  /// Dropout probability after each activation (training mode only).
  TORCH_ARG(double, dropout) = 0.0;
  /// Each run of this many consecutive hidden layers is one kiln::nn::checkpoint
  /// segment (the last may be shorter); 0 keeps every activation.
  TORCH_ARG(int64_t, checkpoint_every) = 0;
};

/// input: Linear(in, width) → act → dropout; layers.i: Linear(width, width) → act →
/// dropout, i < layers; output: Linear(width, out). Parameter names are stable for
/// checkpoints: input.weight, input.bias, layers.0.weight, …, output.bias.
/// Hidden and input layers start He-initialised (normal, 2/fan_in) with zero bias, so
/// the signal survives 50 relu layers (whatever the activation: gelu keeps it too;
/// a deep sigmoid stack trains poorly however it starts); the head is initialised
/// as torch::nn::Linear.
/// Checkpointing changes memory and time only: outputs and gradients are the same.
/// Example: kiln::nn::DeepMlp net(kiln::nn::DeepMlpOptions(784, 10).checkpoint_every(5));
class DeepMlpImpl : public torch::nn::Cloneable<DeepMlpImpl>, public OutputHead {
 public:
  explicit DeepMlpImpl(DeepMlpOptions options);
  void reset() override;
  /// He-normal weights and zero biases before each activation; the head as torch::nn::Linear.
  void reset_parameters();
  /// x: (B, …) flattened to (B, in_features) → (B, out_features)
  torch::Tensor forward(torch::Tensor x);
  void pretty_print(std::ostream& stream) const override;
  /// "output.weight", "output.bias".
  std::vector<std::string> head_parameters() const override;

  DeepMlpOptions options;

 private:
  Linear input_{nullptr};
  torch::nn::ModuleList layers_{nullptr};
  Linear output_{nullptr};
};
TORCH_MODULE(DeepMlp);

}  // namespace kiln::nn
