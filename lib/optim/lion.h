// kiln::optim::Lion (Chen et al. 2023, "Symbolic Discovery of Optimization
// Algorithms"): the sign of an interpolated momentum, with decoupled weight decay;
// one moment per parameter instead of AdamW's two.
#pragma once
#include <torch/optim/optimizer.h>

#include "optim/state_reporter.h"

namespace kiln::optim {

struct LionOptions : public torch::optim::OptimizerCloneableOptions<LionOptions> {
  LionOptions(double lr = 1e-4) : lr_(lr) {}  // NOLINT: implicit like torch's options
  TORCH_ARG(double, lr) = 1e-4;
  TORCH_ARG(double, beta1) = 0.9;
  TORCH_ARG(double, beta2) = 0.99;
  TORCH_ARG(double, weight_decay) = 0.0;

 public:
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct LionParamState : public torch::optim::OptimizerCloneableParamState<LionParamState> {
  TORCH_ARG(torch::Tensor, exp_avg);
};

/// u = sign(β1·m + (1−β1)·g);  p ← p·(1 − lr·λ) − lr·u;  m ← β2·m + (1−β2)·g.
/// Example: kiln::optim::Lion opt(model->parameters(), LionOptions(1e-4).weight_decay(0.1));
class Lion : public torch::optim::Optimizer, public StateReporter {
 public:
  explicit Lion(const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
                LionOptions defaults = {});
  explicit Lion(std::vector<torch::Tensor> params, LionOptions defaults = {})
      : Lion({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults)) {}

  torch::Tensor step(LossClosure closure = nullptr) override;
  /// Every group's options and every parameter's momentum, by position (state_io.h).
  void save(torch::serialize::OutputArchive& archive) const override;
  /// Reads what save() wrote; a state for other parameters is an error and changes nothing.
  void load(torch::serialize::InputArchive& archive) override;
  std::vector<at::Tensor> state_tensors() const override;
};

}  // namespace kiln::optim
