// kiln::nn::ConvNet: an image classifier of 3×3 Conv–BatchNorm–activation blocks with
// max pooling and an MLP head. Convolution and batch norm are ATen's (oneDNN on the
// CPU, cuDNN on CUDA); the activations, the head's layers and the loss are kiln's ops.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include <vector>

#include "nn/activation.h"
#include "nn/head.h"
#include "nn/linear.h"

namespace kiln::nn {

struct ConvNetOptions {
  ConvNetOptions(std::vector<int64_t> input_shape, int64_t out_features)
      : input_shape_(std::move(input_shape)), out_features_(out_features) {}
  /// One image: (C, H, W), or (H, W) for one channel. A flat input (B, C·H·W) is
  /// viewed as images of this shape.
  TORCH_ARG(std::vector<int64_t>, input_shape);
  TORCH_ARG(int64_t, out_features);
  /// Output channels of each Conv(3×3, padding 1)–BatchNorm–activation block, in order.
  TORCH_ARG(std::vector<int64_t>, channels) = std::vector<int64_t>({32, 32, 64, 64});
  /// The blocks (1-based) after which a 2×2 max-pool halves the image.
  TORCH_ARG(std::vector<int64_t>, pool_after) = std::vector<int64_t>({2, 4});
  /// The head's hidden width (Linear–activation before dropout and the output Linear); 0: none.
  TORCH_ARG(int64_t, hidden) = 256;
  /// Dropout before the output layer (training mode only).
  TORCH_ARG(double, dropout) = 0.0;
  /// Run the convolutions in channels-last (NHWC) layout, images and filters: oneDNN's
  /// fast path on the CPU.
  TORCH_ARG(bool, channels_last) = false;
  /// After each batch norm (kiln::ops::relu, gelu or sigmoid) and the head's hidden
  /// Linear (there gelu is kiln::ops::linear_gelu). Layers start as torch's do.
  TORCH_ARG(ActivationOptions, activation);
};

class Activation;

/// Example: kiln::nn::ConvNet net(kiln::nn::ConvNetOptions({1, 28, 28}, 10).channels_last(true));
class ConvNetImpl : public torch::nn::Cloneable<ConvNetImpl>, public OutputHead {
 public:
  explicit ConvNetImpl(ConvNetOptions options);
  void reset() override;
  /// x: (B, C, H, W), or (B, C·H·W) viewed as images → logits (B, out_features)
  torch::Tensor forward(torch::Tensor x);
  void pretty_print(std::ostream& stream) const override;
  /// The output Linear's weight and bias.
  std::vector<std::string> head_parameters() const override;

  ConvNetOptions options;

 private:
  /// Block i's batch norm and then the activation: kiln::ops::batch_norm (the ReLU
  /// fused into it) where it runs, else torch's BatchNorm2d and act.
  torch::Tensor norm_then(size_t i, const torch::Tensor& x, const Activation& act);
  /// Block i's 3×3 convolution: the module's own, or under CPU bf16/fp16 autocast where
  /// the CPU has no fast bf16 products, the float32 one of the rounded operands.
  torch::Tensor conv(size_t i, const torch::Tensor& x);
  /// The 2×2 max-pool after a block: kiln::ops::max_pool2 where it runs, else ATen's.
  torch::Tensor pool(const torch::Tensor& x) const;

  torch::nn::ModuleList convs_{nullptr}, norms_{nullptr};
  Linear hidden_{nullptr}, output_{nullptr};
  std::vector<int64_t> image_;  // (C, H, W)
};
TORCH_MODULE(ConvNet);

}  // namespace kiln::nn
