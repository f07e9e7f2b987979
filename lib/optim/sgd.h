// kiln::optim::SGD: stochastic gradient descent with momentum, dampening,
// Nesterov momentum and (coupled, L2) weight decay — the same arithmetic as
// torch::optim::SGD, so every config has a plain baseline.
#pragma once
#include <torch/optim/optimizer.h>

#include "optim/state_reporter.h"

namespace kiln::optim {

struct SGDOptions : public torch::optim::OptimizerCloneableOptions<SGDOptions> {
  SGDOptions(double lr = 1e-2) : lr_(lr) {}  // NOLINT: implicit like torch's options
  TORCH_ARG(double, lr) = 1e-2;
  TORCH_ARG(double, momentum) = 0.0;
  TORCH_ARG(double, dampening) = 0.0;
  /// L2 penalty added to the gradient (g + λ·p), as torch's SGD does.
  TORCH_ARG(double, weight_decay) = 0.0;
  TORCH_ARG(bool, nesterov) = false;

 public:
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct SGDParamState : public torch::optim::OptimizerCloneableParamState<SGDParamState> {
  TORCH_ARG(torch::Tensor, momentum_buffer);
};

/// buf ← μ·buf + (1−τ)·g (buf = g at the first step); p ← p − lr·(g + μ·buf if
/// Nesterov else buf), with g = ∇ + λ·p. Parameters get state only when μ ≠ 0.
/// Example: kiln::optim::SGD opt(model->parameters(), SGDOptions(0.1).momentum(0.9).nesterov(true));
class SGD : public torch::optim::Optimizer, public StateReporter {
 public:
  explicit SGD(const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
               SGDOptions defaults = {});
  explicit SGD(std::vector<torch::Tensor> params, SGDOptions defaults = {})
      : SGD({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults)) {}

  torch::Tensor step(LossClosure closure = nullptr) override;
  /// Every group's options and every parameter's momentum buffer, by position (state_io.h).
  void save(torch::serialize::OutputArchive& archive) const override;
  /// Reads what save() wrote; a state for other parameters is an error and changes nothing.
  void load(torch::serialize::InputArchive& archive) override;
  std::vector<at::Tensor> state_tensors() const override;
};

}  // namespace kiln::optim
