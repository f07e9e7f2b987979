// kiln::nn::Mlp: a multi-layer perceptron whose activations are kiln ops, the
// model of the default Fashion-MNIST experiment and the pattern for later modules.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <optional>
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

/// What a taped forward keeps for its backward, as autograd's nodes would: each layer's
/// input; each hidden layer's activation output (relu, sigmoid: their gradients read it)
/// or pre-activation (gelu); under autocast the lower-precision copies of each layer's
/// weight and bias its products used (`casts`: weight, bias, layer by layer; else none:
/// the parameters themselves), which a step's later micro-batches may reuse; the
/// dropout probability it applied (0: none) and each hidden layer's dropout seed.
struct MlpTape {
  std::vector<at::Tensor> inputs, saved, casts;
  std::optional<at::ScalarType> autocast;
  double dropout = 0.0;
  std::vector<int64_t> seeds;
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
  /// Whether the training step can run taped (forward_taped, backward_taped) instead
  /// of through autograd's graph: every Mlp (relu, gelu or sigmoid hidden layers, or
  /// none; with or without dropout).
  bool taped_supported() const;
  /// forward(x) without autograd's graph, keeping in `tape` what backward_taped reads:
  /// the same ops on the same operands (dropout's seeds drawn in the same order), so the
  /// same logits bit for bit. `autocast` (bfloat16 or float16): forward(x) under
  /// autocast in that dtype — each layer's input, weight and bias cast as the linear
  /// ops' autocast kernels cast them (kiln::ops::autocast_cast), the ops run in it.
  /// `reuse_casts`: take the weights' and biases' casts from `tape` where a forward of
  /// an earlier micro-batch of this step left them (backward_taped with keep_casts),
  /// instead of casting again: the same values, as long as no parameter has changed
  /// since (the caller's promise; within a step none does).
  /// Example: MlpTape tape; auto logits = net->forward_taped(x, tape, at::kBFloat16);
  torch::Tensor forward_taped(const torch::Tensor& x, MlpTape& tape,
                              std::optional<at::ScalarType> autocast = std::nullopt, bool reuse_casts = false);
  /// The backward autograd would run from `grad` (dloss/dlogits) through forward_taped's
  /// layers: the same ops in the same order, each gradient only where a parameter
  /// (or a layer before it) requires one, cast back to the parameter's dtype where
  /// autocast cast it (as the cast's node does) and added into the parameters' .grad as
  /// AccumulateGrad adds (set when undefined, added in place otherwise). Empties `tape`
  /// but for its casts when `keep_casts` (the step's next micro-batch reuses them).
  /// `ready`, when given, is called with each parameter once its .grad holds this
  /// backward's gradient (head first: a data-parallel reducer starts its buckets then).
  /// Example: net->backward_taped(kiln::ops::cross_entropy_backward(one, logits, y, lse), tape);
  void backward_taped(const torch::Tensor& grad, MlpTape& tape, bool keep_casts = false,
                      const std::function<void(const torch::Tensor&)>& ready = {});
  /// The last Linear's weight and bias: "layers.<hidden().size()>.weight", ….
  std::vector<std::string> head_parameters() const override;

  MlpOptions options;

 private:
  torch::nn::ModuleList layers_{nullptr};
};
TORCH_MODULE(Mlp);

}  // namespace kiln::nn
