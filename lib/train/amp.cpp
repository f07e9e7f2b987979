// The autocast guard, the precision names and GradScaler: the C++ counterparts of
// torch.autocast and torch.amp.GradScaler, following their Python sources step by step.
#include "train/amp.h"

#include <ATen/autocast_mode.h>
#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>
#include <ATen/ops/_amp_update_scale.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <torch/serialize/archive.h>

#include <cmath>
#include <algorithm>

#include "util/error.h"

namespace kiln::train {

AutocastGuard::AutocastGuard(at::DeviceType device, at::ScalarType dtype, bool enabled)
    : device_(device),
      previous_enabled_(at::autocast::is_autocast_enabled(device)),
      previous_dtype_(at::autocast::get_autocast_dtype(device)) {
  TORCH_CHECK(at::autocast::is_autocast_available(device),
              "AutocastGuard: expected a device type with autocast (cpu, cuda, privateuseone), got ",
              device);
  TORCH_CHECK(!enabled || dtype == at::kHalf || dtype == at::kBFloat16,
              "AutocastGuard: expected dtype float16 or bfloat16, got ", dtype);
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  // The cast cache holds lower-precision copies of the weights for the outermost
  // region only; they would be stale after the optimizer step.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_, previous_enabled_);
  at::autocast::set_autocast_dtype(device_, previous_dtype_);
}

PrecisionPlan precision_plan(const std::string& name, at::DeviceType device) {
  TORCH_CHECK(at::autocast::is_autocast_available(device),
              "precision_plan: expected a device type with autocast (cpu, cuda, privateuseone), got ",
              device);
  if (name == "fp32") return {name, false, at::kFloat, false};
  if (name == "bf16") return {name, true, at::kBFloat16, false};
  if (name == "fp16") return {name, true, at::kHalf, true};
  std::string valid;
  for (const char* n : kPrecisionNames) valid += (valid.empty() ? "" : ", ") + std::string(n);
  throw InputError("train.precision: expected one of " + valid + ", got '" + name + "'");
}

GradScaler::GradScaler(GradScalerOptions options) : options_(options) {
  TORCH_CHECK(std::isfinite(options_.init_scale()) && options_.init_scale() > 0,
              "GradScaler: init_scale: expected a finite value > 0, got ", options_.init_scale());
  TORCH_CHECK(options_.growth_factor() > 1, "GradScaler: growth_factor: expected > 1, got ",
              options_.growth_factor());
  TORCH_CHECK(options_.backoff_factor() > 0 && options_.backoff_factor() < 1,
              "GradScaler: backoff_factor: expected in (0, 1), got ", options_.backoff_factor());
  TORCH_CHECK(options_.growth_interval() > 0, "GradScaler: growth_interval: expected > 0, got ",
              options_.growth_interval());
  // CPU until the first loss shows where training runs.
  scale_ = at::full({1}, options_.init_scale(), at::kFloat);
  growth_tracker_ = at::zeros({1}, at::kInt);
}

at::Tensor GradScaler::scale(const at::Tensor& loss) {
  if (!enabled()) return loss;
  if (scale_.device() != loss.device()) {
    scale_ = scale_.to(loss.device());
    growth_tracker_ = growth_tracker_.to(loss.device());
  }
  // As PyTorch: the (1)-shaped float32 scale promotes a half loss to float32,
  // so 2^16 · loss cannot overflow float16's range before backward starts.
  return loss * scale_;
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (!enabled()) return;
  auto& mine = per_optimizer_[&optimizer];
  TORCH_CHECK(mine.stage != Stage::kStepped,
              "GradScaler: unscale_ after step(): call update() first");
  if (mine.stage == Stage::kUnscaled) return;  // idempotent within a step

  // The reciprocal in double, then float, as PyTorch: 1/2^k stays exact.
  const at::Tensor inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  // The kernel takes tensors of one device and dtype at a time; one inf flag per device.
  struct Group {
    at::Device device;
    at::ScalarType dtype;
    std::vector<at::Tensor> grads;
  };
  std::vector<Group> groups;
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params()) {
      const auto& g = p.grad();
      if (!g.defined()) continue;
      TORCH_CHECK(!g.is_sparse(), "GradScaler: sparse gradients are not supported");
      TORCH_CHECK(g.is_floating_point() && g.scalar_type() != at::kDouble,
                  "GradScaler: expected float32/float16/bfloat16 gradients, got ",
                  g.scalar_type());
      auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& x) {
        return x.device == g.device() && x.dtype == g.scalar_type();
      });
      if (it == groups.end()) it = groups.insert(groups.end(), {g.device(), g.scalar_type(), {}});
      it->grads.push_back(g);
    }
  mine.found_inf.clear();
  for (auto& group : groups) {
    auto flag = std::find_if(mine.found_inf.begin(), mine.found_inf.end(),
                             [&](const at::Tensor& f) { return f.device() == group.device; });
    if (flag == mine.found_inf.end())
      flag = mine.found_inf.insert(mine.found_inf.end(),
                                   at::zeros({1}, at::TensorOptions(at::kFloat).device(group.device)));
    at::_amp_foreach_non_finite_check_and_unscale_(group.grads, *flag, inv_scale.to(group.device));
  }
  mine.stage = Stage::kUnscaled;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  if (!enabled()) {
    optimizer.step();
    return true;
  }
  auto& mine = per_optimizer_[&optimizer];
  TORCH_CHECK(mine.stage != Stage::kStepped,
              "GradScaler: step() called twice for one optimizer; call update() between steps");
  if (mine.stage == Stage::kReady) unscale_(optimizer);
  // The one host sync of the step: whether to apply it.
  double found = 0;
  for (const auto& flag : mine.found_inf) found += flag.item<double>();
  mine.stage = Stage::kStepped;
  if (found != 0) {
    ++skipped_steps_;
    return false;
  }
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!enabled()) return;
  TORCH_CHECK(!per_optimizer_.empty(), "GradScaler: update() without step(): nothing was checked");
  // Every flag recorded this step, on the scale's device, summed: any inf backs off.
  at::Tensor found = at::zeros({1}, scale_.options());
  for (const auto& [opt, mine] : per_optimizer_)
    for (const auto& flag : mine.found_inf) found.add_(flag.to(scale_.device()));
  at::_amp_update_scale_(scale_, growth_tracker_, found, options_.growth_factor(),
                         options_.backoff_factor(), options_.growth_interval());
  per_optimizer_.clear();
}

double GradScaler::scale() const { return enabled() ? scale_.item<double>() : 1.0; }

GradScalerState GradScaler::state() const {
  return {scale_.item<double>(), growth_tracker_.item<int64_t>(), skipped_steps_};
}

void GradScaler::load_state(const GradScalerState& s) {
  TORCH_CHECK(std::isfinite(s.scale) && s.scale > 0,
              "GradScaler state: scale: expected a finite value > 0, got ", s.scale);
  TORCH_CHECK(s.growth_tracker >= 0 && s.growth_tracker < options_.growth_interval(),
              "GradScaler state: growth_tracker: expected in [0, growth_interval = ",
              options_.growth_interval(), "), got ", s.growth_tracker);
  TORCH_CHECK(s.skipped_steps >= 0, "GradScaler state: skipped_steps: expected >= 0, got ",
              s.skipped_steps);
  scale_.fill_(s.scale);
  growth_tracker_.fill_(s.growth_tracker);
  skipped_steps_ = s.skipped_steps;
  per_optimizer_.clear();
}

void GradScaler::save(torch::serialize::OutputArchive& ar) const {
  const auto s = state();
  ar.write("kind", c10::IValue(std::string("kiln::train::GradScaler")));
  ar.write("scale", c10::IValue(s.scale));
  ar.write("growth_tracker", c10::IValue(s.growth_tracker));
  ar.write("skipped_steps", c10::IValue(s.skipped_steps));
}

void GradScaler::load(torch::serialize::InputArchive& ar) {
  c10::IValue kind, scale, tracker, skipped;
  TORCH_CHECK(ar.try_read("kind", kind) && kind.isString() &&
                  kind.toStringRef() == "kiln::train::GradScaler",
              "GradScaler state: expected a kiln::train::GradScaler state, got ",
              kind.isString() ? kind.toStringRef() : std::string("something else"));
  TORCH_CHECK(ar.try_read("scale", scale) && scale.isDouble(),
              "GradScaler state: missing or non-float entry 'scale'");
  TORCH_CHECK(ar.try_read("growth_tracker", tracker) && tracker.isInt(),
              "GradScaler state: missing or non-integer entry 'growth_tracker'");
  TORCH_CHECK(ar.try_read("skipped_steps", skipped) && skipped.isInt(),
              "GradScaler state: missing or non-integer entry 'skipped_steps'");
  load_state({scale.toDouble(), tracker.toInt(), skipped.toInt()});
}

}  // namespace kiln::train
