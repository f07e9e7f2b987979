// Step-based learning-rate schedules: linear warmup, then cosine, linear,
// constant or warmup-stable-decay, scaling every parameter group's base lr; the
// schedule's position and base lrs are saved and restored with the optimizer.
#pragma once
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <string>
#include <vector>

namespace kiln::optim {

struct ScheduleOptions {
  /// "constant", "cosine", "linear" or "wsd" (warmup-stable-decay).
  TORCH_ARG(std::string, kind) = "constant";
  /// Steps of linear warmup from lr/warmup_steps to lr (0: none).
  TORCH_ARG(int64_t, warmup_steps) = 0;
  /// The step at which cosine/linear/wsd reach min_lr_ratio·lr (and stay).
  TORCH_ARG(int64_t, total_steps) = 0;
  /// The final lr as a fraction of each group's base lr.
  TORCH_ARG(double, min_lr_ratio) = 0.0;
  /// wsd: the step where the decay begins (the lr is flat from warmup until then).
  TORCH_ARG(int64_t, decay_start) = 0;
  /// wsd: "linear" or "cosine" decay from decay_start to total_steps.
  TORCH_ARG(std::string, decay_shape) = "linear";
};

/// The valid ScheduleOptions::kind names, in order.
const std::vector<std::string>& schedule_kinds();

/// Sets each group's lr to base_lr·factor(t) for the t-th optimizer step (t from 0).
/// Example:
///   LrSchedule sched(opt, ScheduleOptions().kind("cosine").warmup_steps(100).total_steps(5000));
///   for (…) { opt.zero_grad(); loss.backward(); opt.step(); sched.step(); }
class LrSchedule {
 public:
  /// Remembers every group's current lr as its base lr and applies factor(0).
  /// Throws kiln::InputError for an unknown kind or decay_shape (listing the valid
  /// names) and for inconsistent steps.
  LrSchedule(torch::optim::Optimizer& optimizer, ScheduleOptions options);

  /// Advances one step and sets the lrs for the next optimizer step.
  void step();
  /// The multiplier of the base lrs at step t (pure; t ≥ 0).
  double factor(int64_t t) const;
  int64_t steps_done() const { return step_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  /// New base lrs (one per group, e.g. a resume's config), applied at the current step.
  void rebase(std::vector<double> base_lrs);
  const ScheduleOptions& options() const { return options_; }

  /// Writes "schedule_kind", "schedule_step" and "schedule_base_lr<g>" into `archive`
  /// (the optimizer's own archive is fine: no key collides).
  void save(torch::serialize::OutputArchive& archive) const;
  /// Restores the step and base lrs; a file of another kind or group count is an
  /// error that changes nothing. Re-applies the lrs.
  void load(torch::serialize::InputArchive& archive);

 private:
  void apply();
  torch::optim::Optimizer& optimizer_;
  ScheduleOptions options_;
  std::vector<double> base_lrs_;
  int64_t step_ = 0;
};

}  // namespace kiln::optim
