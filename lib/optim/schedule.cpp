// The schedule factors (pure functions of the step) and the object that applies
// them to an optimizer's groups and saves its position.
#include "optim/schedule.h"

#include "util/error.h"

#include <algorithm>
#include <cmath>

namespace kiln::optim {
namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

void validate(const ScheduleOptions& o) {
  const auto& kinds = schedule_kinds();
  if (std::find(kinds.begin(), kinds.end(), o.kind()) == kinds.end())
    throw InputError("schedule kind: expected one of " + joined(kinds) + ", found \"" + o.kind() + "\"");
  if (o.kind() == "wsd" && o.decay_shape() != "linear" && o.decay_shape() != "cosine")
    throw InputError("schedule decay_shape: expected one of linear, cosine, found \"" +
                     o.decay_shape() + "\"");
  if (o.warmup_steps() < 0)
    throw InputError("schedule warmup_steps: expected >= 0, found " + std::to_string(o.warmup_steps()));
  if (!(o.min_lr_ratio() >= 0 && o.min_lr_ratio() <= 1))
    throw InputError("schedule min_lr_ratio: expected a number in [0, 1], found " +
                     std::to_string(o.min_lr_ratio()));
  if (o.kind() != "constant" && o.total_steps() <= o.warmup_steps())
    throw InputError("schedule total_steps: expected more than warmup_steps (" +
                     std::to_string(o.warmup_steps()) + ") for a " + o.kind() + " schedule, found " +
                     std::to_string(o.total_steps()));
  if (o.kind() == "wsd" && (o.decay_start() < o.warmup_steps() || o.decay_start() > o.total_steps()))
    throw InputError("schedule decay_start: expected between warmup_steps (" +
                     std::to_string(o.warmup_steps()) + ") and total_steps (" +
                     std::to_string(o.total_steps()) + "), found " + std::to_string(o.decay_start()));
}

// From 1 at progress 0 to `floor` at progress 1.
double decay(const std::string& shape, double progress, double floor) {
  progress = std::clamp(progress, 0.0, 1.0);
  const double remaining =
      shape == "cosine" ? 0.5 * (1 + std::cos(M_PI * progress)) : 1 - progress;
  return floor + (1 - floor) * remaining;
}

}  // namespace

const std::vector<std::string>& schedule_kinds() {
  static const std::vector<std::string> kinds = {"constant", "cosine", "linear", "wsd"};
  return kinds;
}

LrSchedule::LrSchedule(torch::optim::Optimizer& optimizer, ScheduleOptions options)
    : optimizer_(optimizer), options_(std::move(options)) {
  validate(options_);
  for (const auto& group : optimizer_.param_groups()) base_lrs_.push_back(group.options().get_lr());
  apply();
}

double LrSchedule::factor(int64_t t) const {
  const auto& o = options_;
  const int64_t w = o.warmup_steps();
  if (t < w) return static_cast<double>(t + 1) / static_cast<double>(w);
  const double after = static_cast<double>(t - w), span = static_cast<double>(o.total_steps() - w);
  if (o.kind() == "cosine") return decay("cosine", after / span, o.min_lr_ratio());
  if (o.kind() == "linear") return decay("linear", after / span, o.min_lr_ratio());
  if (o.kind() == "wsd") {
    if (t < o.decay_start()) return 1.0;
    const double len = static_cast<double>(o.total_steps() - o.decay_start());
    return len > 0 ? decay(o.decay_shape(), static_cast<double>(t - o.decay_start()) / len,
                           o.min_lr_ratio())
                   : o.min_lr_ratio();
  }
  return 1.0;  // constant
}

void LrSchedule::step() {
  ++step_;
  apply();
}

void LrSchedule::apply() {
  auto& groups = optimizer_.param_groups();
  TORCH_CHECK(groups.size() == base_lrs_.size(), "LrSchedule: the optimizer has ", groups.size(),
              " parameter groups, the schedule was made for ", base_lrs_.size());
  const double f = factor(step_);
  for (size_t g = 0; g < groups.size(); ++g) groups[g].options().set_lr(base_lrs_[g] * f);
}

void LrSchedule::rebase(std::vector<double> base_lrs) {
  TORCH_CHECK(base_lrs.size() == base_lrs_.size(), "LrSchedule::rebase: expected ", base_lrs_.size(),
              " base lrs, got ", base_lrs.size());
  base_lrs_ = std::move(base_lrs);
  apply();
}

void LrSchedule::save(torch::serialize::OutputArchive& ar) const {
  ar.write("schedule_kind", c10::IValue(options_.kind()));
  ar.write("schedule_step", c10::IValue(step_));
  ar.write("schedule_groups", c10::IValue(static_cast<int64_t>(base_lrs_.size())));
  for (size_t g = 0; g < base_lrs_.size(); ++g)
    ar.write(c10::str("schedule_base_lr", g), c10::IValue(base_lrs_[g]));
}

void LrSchedule::load(torch::serialize::InputArchive& ar) {
  auto read = [&](const std::string& key) {
    c10::IValue v;
    TORCH_CHECK(ar.try_read(key, v), "schedule state: missing entry '", key, "'");
    return v;
  };
  const auto kind = read("schedule_kind");
  TORCH_CHECK(kind.isString() && kind.toStringRef() == options_.kind(),
              "schedule state: expected a \"", options_.kind(), "\" schedule, the file has ",
              kind.isString() ? "\"" + kind.toStringRef() + "\"" : kind.tagKind());
  const auto step = read("schedule_step"), groups = read("schedule_groups");
  TORCH_CHECK(step.isInt() && step.toInt() >= 0, "schedule state: schedule_step: expected an integer >= 0");
  TORCH_CHECK(groups.isInt() && groups.toInt() == static_cast<int64_t>(base_lrs_.size()),
              "schedule state: expected ", base_lrs_.size(), " parameter groups, the file has ",
              groups.isInt() ? std::to_string(groups.toInt()) : groups.tagKind());
  std::vector<double> base;
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    const auto v = read(c10::str("schedule_base_lr", g));
    TORCH_CHECK(v.isDouble(), "schedule state: schedule_base_lr", g, ": expected a float");
    base.push_back(v.toDouble());
  }
  base_lrs_ = std::move(base);
  step_ = step.toInt();
  apply();
}

}  // namespace kiln::optim
