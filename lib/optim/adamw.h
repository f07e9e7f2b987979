// kiln::optim::AdamW: Adam with decoupled weight decay (Loshchilov & Hutter) as a
// torch::optim::Optimizer subclass, with parameter groups and a state file that
// is checked against the parameters it is loaded into.
#pragma once
#include <torch/optim/optimizer.h>

#include "optim/state_reporter.h"

namespace kiln::optim {

struct AdamWOptions : public torch::optim::OptimizerCloneableOptions<AdamWOptions> {
  AdamWOptions(double lr = 1e-3) : lr_(lr) {}  // NOLINT: implicit like torch's options
  TORCH_ARG(double, lr) = 1e-3;
  TORCH_ARG(double, beta1) = 0.9;
  TORCH_ARG(double, beta2) = 0.999;
  TORCH_ARG(double, eps) = 1e-8;
  TORCH_ARG(double, weight_decay) = 1e-2;

 public:
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct AdamWParamState : public torch::optim::OptimizerCloneableParamState<AdamWParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(torch::Tensor, exp_avg);
  TORCH_ARG(torch::Tensor, exp_avg_sq);
};

/// Example: kiln::optim::AdamW opt(model->parameters(), AdamWOptions(1e-3).weight_decay(0.01));
class AdamW : public torch::optim::Optimizer, public StateReporter {
 public:
  explicit AdamW(const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
                 AdamWOptions defaults = {});
  explicit AdamW(std::vector<torch::Tensor> params, AdamWOptions defaults = {})
      : AdamW({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults)) {}

  torch::Tensor step(LossClosure closure = nullptr) override;
  /// Writes every group's options and every parameter's state, by position.
  void save(torch::serialize::OutputArchive& archive) const override;
  /// Reads what save() wrote; a state for other parameters (count, shape, dtype)
  /// is an error that names the group, the parameter and the mismatch.
  void load(torch::serialize::InputArchive& archive) override;
  std::vector<at::Tensor> state_tensors() const override;
};

}  // namespace kiln::optim
