// The activation a model applies after its layers, chosen by name from config
// (relu, gelu, sigmoid with the documents' beta and clamped gradient): one place
// that every model (Mlp, DeepMlp, DynamicMlp, ConvNet) asks instead of four copies.
#pragma once
#include <torch/arg.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/types.h>

#include <ostream>
#include <string>
#include <vector>

#include "nn/linear.h"

namespace kiln::nn {

struct ActivationOptions {
  /// Implicit, so a model's options read `.activation("gelu")`.
  /* implicit */ ActivationOptions(std::string name = "relu") : name_(std::move(name)) {}
  /* implicit */ ActivationOptions(const char* name) : name_(name) {}
  /// One of activation_names(): "relu" (kiln::ops::relu), "gelu" (kiln::ops::gelu, or
  /// kiln::ops::linear_gelu fused into the Linear before it), "sigmoid" (kiln::ops::sigmoid).
  TORCH_ARG(std::string, name);
  /// sigmoid: s = 1 / (1 + exp(−beta·x)); beta > 0.
  TORCH_ARG(double, sigmoid_beta) = 1.0;
  /// sigmoid: the local derivative beta·s·(1−s) is clamped to ±this in backward; 0 = no clamp.
  TORCH_ARG(double, sigmoid_grad_clip) = 0.0;
};

/// The names ActivationOptions::name accepts, in order: relu, gelu, sigmoid.
const std::vector<std::string>& activation_names();

/// An activation, checked once and then applied by value (a checkpointed segment
/// may capture it and outlive the module).
/// Example: kiln::nn::Activation act("gelu", "DeepMlp"); auto y = act.linear_then(*layer, x);
class Activation {
 public:
  /// Checks `options`; `owner` ("DeepMlp") prefixes the messages, which name the
  /// option, what is expected and what was given.
  /// Example: kiln::nn::Activation act(kiln::nn::ActivationOptions("sigmoid").sigmoid_beta(2), "Mlp");
  Activation(ActivationOptions options, const std::string& owner);
  /// The activation of x, elementwise; keeps x's shape, dtype and memory format.
  /// Example: y = act.apply(batch_norm(x));  // (B, C, H, W)
  torch::Tensor apply(const torch::Tensor& x) const;
  /// apply(layer(x)), with GELU fused into the matrix multiply (kiln::ops::linear_gelu).
  /// Example: y = act.linear_then(*hidden_, x);  // x: (B, in) → (B, out)
  torch::Tensor linear_then(LinearImpl& layer, const torch::Tensor& x) const;
  const ActivationOptions& options() const { return options_; }

 private:
  ActivationOptions options_;
};

/// What follows each hidden Linear of kiln's MLPs, by value (a checkpointed segment
/// captures it): the activation, dropout when training, and the residual add.
/// Example: kiln::nn::LayerRule rule{act, 0.1, is_training()}; x = rule(*layer, x);
struct LayerRule {
  Activation act;
  double dropout = 0.0;
  bool training = false;
  /// Add the layer's input to its output where their shapes match (kiln::ops::scaled_add).
  bool residual = false;
  /// Linear → activation → dropout (→ + x). x: (B, in) → (B, out)
  torch::Tensor operator()(LinearImpl& layer, const torch::Tensor& x) const;
  /// Layers [begin, end) of a list of kiln::nn::Linear, each as operator().
  /// Example: x = rule.run(layers_, 0, depth, x);  // (B, width) → (B, width)
  torch::Tensor run(torch::nn::ModuleList layers, int64_t begin, int64_t end, torch::Tensor x) const;
};

/// "relu", "gelu", or "sigmoid(beta=2, grad_clip=0.5)" for pretty_print.
std::ostream& operator<<(std::ostream& stream, const ActivationOptions& options);

}  // namespace kiln::nn
