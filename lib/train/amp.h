// Mixed precision without Python: an autocast guard that behaves like
// torch.autocast, dynamic loss scaling (GradScaler) on ATen's _amp_* ops, and the
// mapping from a precision name ("fp32", "bf16", "fp16") to both.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <torch/arg.h>
#include <torch/optim/optimizer.h>

#include <string>
#include <unordered_map>

namespace kiln::train {

/// Runs the enclosed code under autocast for one device type, as Python's
/// `with torch.autocast(device, dtype, enabled):` does: saves the device's enabled
/// flag and dtype, sets them, counts the nesting; on destruction restores them and,
/// when the outermost guard ends, clears autocast's cast cache (the lower-precision
/// copies of the weights). Autocast state is per thread. Wrap forward and the loss
/// only: backward runs each op in the dtype forward chose.
/// Example: { kiln::train::AutocastGuard amp(at::kCPU, at::kBFloat16); loss = f(model(x), y); }
class AutocastGuard {
 public:
  /// dtype must be float16 or bfloat16 when enabled; an enabled=false guard turns
  /// autocast off inside an enabled region (and back on when it ends).
  AutocastGuard(at::DeviceType device, at::ScalarType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  at::DeviceType device_;
  bool previous_enabled_;
  at::ScalarType previous_dtype_;
};

/// What a precision name means on a device: whether forward runs under autocast,
/// in which dtype, and whether the loss needs dynamic scaling.
struct PrecisionPlan {
  std::string name;                       // "fp32", "bf16" or "fp16"
  bool autocast = false;                  // false for fp32
  at::ScalarType dtype = at::kFloat;      // autocast's dtype (kFloat for fp32)
  bool loss_scaling = false;              // true for fp16 only
};

/// The precision names, in the order error messages list them.
inline const char* const kPrecisionNames[] = {"fp32", "bf16", "fp16"};

/// Maps `[train] precision` to a plan: fp32 plain; bf16 autocast without loss
/// scaling (bfloat16 has float32's exponent range, gradients do not underflow);
/// fp16 autocast with a GradScaler. fp16 is allowed on CPU (autocast and the
/// scaler's ops have CPU kernels) but is slow there and meant for testing the fp16
/// path without a GPU. An unknown name throws kiln::InputError listing the valid ones.
/// Example: auto plan = kiln::train::precision_plan("bf16", at::kCPU);
PrecisionPlan precision_plan(const std::string& name, at::DeviceType device);

struct GradScalerOptions {
  /// The first loss scale, 2^16 as in PyTorch.
  TORCH_ARG(double, init_scale) = 65536.0;
  /// Multiplies the scale after growth_interval consecutive steps without inf/NaN.
  TORCH_ARG(double, growth_factor) = 2.0;
  /// Multiplies the scale after a step whose gradients held inf/NaN.
  TORCH_ARG(double, backoff_factor) = 0.5;
  TORCH_ARG(int64_t, growth_interval) = 2000;
  /// Disabled, scale() returns the loss unchanged and step() always steps.
  TORCH_ARG(bool, enabled) = true;
};

/// The scaler's state as plain numbers, for a checkpoint.
struct GradScalerState {
  double scale = 65536.0;
  int64_t growth_tracker = 0;  // consecutive good steps since the scale last changed
  int64_t skipped_steps = 0;   // steps skipped for inf/NaN gradients, in total
};

/// Dynamic loss scaling as torch.amp.GradScaler, on ATen's
/// _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_ (both have CPU
/// and CUDA kernels). The scale lives on the loss's device; the only host sync is
/// the skip decision in step(). Per step: scale(loss).backward(); unscale_(opt)
/// (optional, before clipping); step(opt); update().
/// Example: kiln::train::GradScaler scaler; scaler.scale(loss).backward(); scaler.step(opt); scaler.update();
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  /// loss · scale in float32 at least, as PyTorch (the loss itself when disabled).
  at::Tensor scale(const at::Tensor& loss);
  /// Divides every gradient of `optimizer` by the scale in place and records
  /// whether any is inf/NaN. A second call before update() does nothing.
  void unscale_(torch::optim::Optimizer& optimizer);
  /// Unscales (unless done) and steps the optimizer unless a gradient was inf/NaN;
  /// returns whether it stepped. A skipped step counts in skipped_steps().
  bool step(torch::optim::Optimizer& optimizer);
  /// Backs the scale off after an inf/NaN step, grows it after growth_interval
  /// good ones, and starts the next step. Call once per step, after step().
  void update();

  /// The current scale (a host sync); 1 when disabled.
  double scale() const;
  int64_t skipped_steps() const { return skipped_steps_; }
  bool enabled() const { return options_.enabled(); }
  const GradScalerOptions& options() const { return options_; }

  GradScalerState state() const;
  /// Restores a state(); a scale ≤ 0 or not finite, or a negative count, is an error.
  void load_state(const GradScalerState& state);
  /// Writes scale, growth_tracker and skipped_steps (and a kind tag) into `archive`.
  void save(torch::serialize::OutputArchive& archive) const;
  /// Reads what save() wrote; a missing or wrong-typed entry is an error naming it.
  void load(torch::serialize::InputArchive& archive);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct PerOptimizer {
    Stage stage = Stage::kReady;
    std::vector<at::Tensor> found_inf;  // one float flag per gradient device
  };

  GradScalerOptions options_;
  at::Tensor scale_;           // float32 (1), on the loss's device
  at::Tensor growth_tracker_;  // int32 (1), with scale_
  int64_t skipped_steps_ = 0;
  std::unordered_map<const torch::optim::Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace kiln::train
