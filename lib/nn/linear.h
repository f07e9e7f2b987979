// kiln::nn::Linear: y = x·wᵀ + b through kiln::ops::linear (cuBLASLt with a fused
// bias on CUDA), initialised exactly as torch::nn::Linear.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace kiln::nn {

struct LinearOptions {
  LinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  TORCH_ARG(int64_t, in_features);
  TORCH_ARG(int64_t, out_features);
  TORCH_ARG(bool, bias) = true;
};

/// Example: kiln::nn::Linear fc(kiln::nn::LinearOptions(784, 512)); auto y = fc(x);
class LinearImpl : public torch::nn::Cloneable<LinearImpl> {
 public:
  LinearImpl(int64_t in_features, int64_t out_features)
      : LinearImpl(LinearOptions(in_features, out_features)) {}
  explicit LinearImpl(LinearOptions options);
  void reset() override;
  /// Kaiming-uniform weights (a = √5) and a uniform bias in ±1/√in, as torch::nn::Linear.
  void reset_parameters();
  /// x: (B, in_features) → (B, out_features)
  torch::Tensor forward(const torch::Tensor& x);
  /// As torch::nn::Module::to, and to the meta device too (shape inference without
  /// data, docs/ops.md), which Module::to refuses: it keeps each parameter's
  /// TensorImpl, and a CPU one cannot become a meta one. On meta the parameters are
  /// replaced by meta tensors of their shapes and dtypes, as Python's Module.to does,
  /// so handles taken before (an optimizer's) keep the old ones.
  /// Example: kiln::nn::Mlp net(…); net->to(at::kMeta);
  void to(torch::Device device, bool non_blocking = false) override;
  using torch::nn::Module::to;
  void pretty_print(std::ostream& stream) const override;

  LinearOptions options;
  torch::Tensor weight;  // (out_features, in_features)
  torch::Tensor bias;    // (out_features) or undefined
};
TORCH_MODULE(Linear);

}  // namespace kiln::nn
