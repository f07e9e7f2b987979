// kiln::nn::DynamicMlp: the source documents' dynamic graph — a stack of residual
// hidden layers of which each forward call runs the first `depth`, the depth drawn
// per training step (so one network learns to answer at every depth).
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <optional>
#include <string>
#include <vector>

#include "nn/activation.h"
#include "nn/depth_sampled.h"
#include "nn/head.h"
#include "nn/linear.h"

namespace kiln::nn {

struct DynamicMlpOptions {
  DynamicMlpOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  TORCH_ARG(int64_t, in_features);
  TORCH_ARG(int64_t, out_features);
  /// Hidden width × width layers built; a forward call runs the first `depth` of them.
  TORCH_ARG(int64_t, max_depth) = 8;
  /// The shallowest depth a training step draws, and the first of the per-depth evaluation.
  TORCH_ARG(int64_t, min_depth) = 1;
  TORCH_ARG(int64_t, width) = 256;
  /// "fixed": every step runs max_depth layers; "uniform": each training step draws
  /// its depth uniformly from min_depth..max_depth (DepthSampled::begin_step).
  TORCH_ARG(std::string, depth_sampling) = "fixed";
  /// Add each block's input to its output where their shapes match (every hidden
  /// layer; the input layer when in_features == width).
  TORCH_ARG(bool, residual) = true;
  TORCH_ARG(ActivationOptions, activation);
  /// Dropout probability after each activation, before the residual add (training only).
  TORCH_ARG(double, dropout) = 0.0;
  /// Each run of this many consecutive hidden layers (of those a call runs) is one
  /// kiln::nn::checkpoint segment; 0 keeps every activation.
  TORCH_ARG(int64_t, checkpoint_every) = 0;
};

/// The names DynamicMlpOptions::depth_sampling accepts: fixed, uniform.
const std::vector<std::string>& depth_samplings();

/// input: Linear(in, width) → act → dropout (+ x when in == width); layers.i, i < depth:
/// x + dropout(act(Linear(width, width)(x))); output: Linear(width, out). The layers a
/// call does not run get no gradient (undefined after zero_grad), so the optimizers
/// leave them and their state untouched in that step (docs/models.md).
/// Weights start He-normal with zero biases; with residual adds the hidden layers'
/// weights are scaled by 1/√max_depth (as GPT-2 scales its residual projections), so
/// the activations' second moment grows at most e-fold over all layers instead of
/// doubling at each. The head starts as torch::nn::Linear.
/// Example: kiln::nn::DynamicMlp net(kiln::nn::DynamicMlpOptions(784, 10).max_depth(6).depth_sampling("uniform"));
class DynamicMlpImpl : public torch::nn::Cloneable<DynamicMlpImpl>, public OutputHead, public DepthSampled {
 public:
  explicit DynamicMlpImpl(DynamicMlpOptions options);
  void reset() override;
  void reset_parameters();
  /// x: (B, …) flattened to (B, in_features) → (B, out_features), at depth(): the forced
  /// depth, else the step's drawn depth in training, else max_depth.
  torch::Tensor forward(torch::Tensor x);
  /// The same at an explicit depth in 0..max_depth. Example: auto y = net->forward_at(x, 3);
  torch::Tensor forward_at(torch::Tensor x, int64_t depth);
  /// The depth forward() runs at now.
  int64_t depth() const;
  void pretty_print(std::ostream& stream) const override;
  /// "output.weight", "output.bias".
  std::vector<std::string> head_parameters() const override;

  void begin_step(uint64_t seed, int64_t step) override;
  int64_t min_depth() const override { return options.min_depth(); }
  int64_t max_depth() const override { return options.max_depth(); }
  void force_depth(std::optional<int64_t> depth) override;

  DynamicMlpOptions options;

 private:
  Linear input_{nullptr};
  torch::nn::ModuleList layers_{nullptr};
  Linear output_{nullptr};
  std::optional<int64_t> drawn_, forced_;
};
TORCH_MODULE(DynamicMlp);

}  // namespace kiln::nn
