// kiln::optim::Muon (Keller Jordan, 2024): momentum, then Newton–Schulz
// orthogonalisation of each 2-D weight matrix's update, scaled by the matrix
// shape; the parameters that are not matrices (and, by choice, embeddings and
// output heads) are updated by an AdamW that Muon holds inside.
#pragma once
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>

#include <memory>

#include "optim/adamw.h"
#include "optim/state_reporter.h"

namespace kiln::optim {

struct MuonOptions : public torch::optim::OptimizerCloneableOptions<MuonOptions> {
  MuonOptions(double lr = 0.02) : lr_(lr) {}  // NOLINT: implicit like torch's options
  TORCH_ARG(double, lr) = 0.02;
  TORCH_ARG(double, momentum) = 0.95;
  TORCH_ARG(bool, nesterov) = true;
  /// Newton–Schulz iterations (the quintic (3.4445, −4.7750, 2.0315) step).
  TORCH_ARG(int64_t, ns_steps) = 5;
  /// Decoupled: p ← p·(1 − lr·λ).
  TORCH_ARG(double, weight_decay) = 0.0;
  /// This group is updated by AdamW with lr, beta1, beta2, eps and weight_decay
  /// (the moments' defaults are AdamW's own).
  TORCH_ARG(bool, adamw) = false;
  TORCH_ARG(double, beta1) = AdamWOptions().beta1();
  TORCH_ARG(double, beta2) = AdamWOptions().beta2();
  TORCH_ARG(double, eps) = AdamWOptions().eps();

 public:
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct MuonParamState : public torch::optim::OptimizerCloneableParamState<MuonParamState> {
  TORCH_ARG(torch::Tensor, momentum_buffer);
};

/// The orthogonalised matrix nearest g (U·Vᵀ of its SVD, approximately): g in
/// float32 normalised by its Frobenius norm, transposed so rows ≤ cols, then
/// `steps` quintic Newton–Schulz iterations X ← a·X + (b·A + c·A²)·X, A = X·Xᵀ.
/// Returns float32 of g's shape. Example: auto o = kiln::optim::newton_schulz(g);
torch::Tensor newton_schulz(const torch::Tensor& g, int64_t steps = 5);

/// For each matrix group: buf ← μ·buf + (1−μ)·g;  u = (1−μ)·g + μ·buf (Nesterov) or buf;
/// p ← p·(1 − lr·λ) − lr·√max(1, rows/cols)·newton_schulz(u). The shape factor keeps the
/// update's RMS per element about equal for tall and wide matrices (Keller Jordan's choice).
/// Groups with adamw(true) are stepped by an inner kiln::optim::AdamW with the group's options.
/// Example: kiln::optim::Muon opt(muon_param_groups(model->named_parameters(), {"head"}));
class Muon : public torch::optim::Optimizer, public StateReporter {
 public:
  explicit Muon(const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
                MuonOptions defaults = {});
  torch::Tensor step(LossClosure closure = nullptr) override;
  /// Every group's options, every matrix's momentum and (nested as "adamw") the AdamW state.
  void save(torch::serialize::OutputArchive& archive) const override;
  /// Reads what save() wrote; a state for other parameters is an error and changes nothing.
  void load(torch::serialize::InputArchive& archive) override;
  /// Every matrix's momentum buffer and the inner AdamW's moments.
  std::vector<at::Tensor> state_tensors() const override;
  /// The inner AdamW over the adamw(true) groups (null when there are none).
  const AdamW* adamw() const { return adamw_.get(); }

 private:
  std::unique_ptr<AdamW> adamw_;      // over the adamw(true) groups' tensors, in order
  std::vector<size_t> adamw_groups_;  // which of param_groups_ those are
};

/// The options of Muon's AdamW group when none are given: lr 3e-4 (Muon's own lr
/// suits orthogonalised matrix updates, not AdamW's), AdamW's betas and eps.
/// Example: auto lr = kiln::optim::muon_adamw_group_defaults().lr();
inline MuonOptions muon_adamw_group_defaults() { return MuonOptions(3e-4).adamw(true); }

/// Splits a model's parameters: 2-D tensors whose names contain none of `exclude`
/// form a Muon group with `muon`; the rest form an AdamW group with `adamw`
/// (adamw(true) is set). An empty group is left out.
/// Example: muon_param_groups(net->named_parameters(), {"embed", "head"}, MuonOptions(0.02), MuonOptions(3e-4))
std::vector<torch::optim::OptimizerParamGroup> muon_param_groups(
    const torch::OrderedDict<std::string, torch::Tensor>& named_parameters,
    const std::vector<std::string>& exclude, const MuonOptions& muon = {},
    const MuonOptions& adamw = muon_adamw_group_defaults());

}  // namespace kiln::optim
