// Profiling a window of training steps with PyTorch's Kineto profiler, from C++:
// a Chrome trace (RUN/profile/trace.json, for Perfetto and chrome://tracing) and
// tables of the top operators by self CPU time, self CUDA time and allocated memory
// (RUN/profile/top_ops.txt). The profiler's C++ API is not a stable public one:
// profiler.cpp is the only file that includes it.
#pragma once
#include <torch/arg.h>

#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace at {
class RecordFunction;
}

namespace kiln::train {

struct ProfileOptions {
  /// The first and last step profiled (1-based, inclusive); first 0 profiles nothing.
  TORCH_ARG(int64_t, first) = 0;
  TORCH_ARG(int64_t, last) = 0;
  /// Record every allocation and free (the memory table, [memory] events in the trace).
  TORCH_ARG(bool, memory) = true;
  /// Record each operator's input shapes (the tables' shape column, the trace's args).
  TORCH_ARG(bool, shapes) = true;
  /// Record the C++ call stack of each operator (large traces).
  TORCH_ARG(bool, stack) = false;
  /// Rows in each table of top_ops.txt.
  TORCH_ARG(int64_t, top) = 20;
};

/// "A:B" (steps A to B), "A" (step A alone) or "" (off) as ProfileOptions' first and
/// last; anything else throws kiln::InputError naming `key` (profile.steps).
/// Example: auto o = kiln::train::parse_profile_steps("101:110", "profile.steps");
ProfileOptions parse_profile_steps(const std::string& text, const std::string& key);

/// One operator's (or kernel's) totals over the profiled steps.
struct OpStats {
  std::string name;
  std::string shapes;       // the input shapes, "[[128, 784], [512, 784]]"; "" when not recorded
  int64_t calls = 0;
  int64_t self_ns = 0;      // time in the op itself, not in the ops it called
  int64_t total_ns = 0;     // time including the ops it called
  int64_t self_alloc_bytes = 0;  // bytes allocated by the op itself (not its callees)
  int64_t self_net_bytes = 0;    // allocated minus freed by the op itself
  int64_t total_alloc_bytes = 0;  // bytes allocated by the op and the ops it called
};

/// What a profiled window produced.
struct ProfileReport {
  int64_t first = 0, last = 0;  // the steps recorded
  std::string trace_path, table_path;
  std::vector<OpStats> cpu;     // CPU operators, by self CPU time
  std::vector<OpStats> device;  // GPU kernels, by self device time (empty on the CPU)
  std::vector<OpStats> memory;  // CPU operators, by self allocated bytes
  double profiled_ms_per_step = 0.0;
  /// The median of the unprofiled steps before the window; nullopt when none ran.
  std::optional<double> unprofiled_ms_per_step;
  /// The tables as top_ops.txt holds them.
  std::string text;
};

/// Turns the profiler on for steps first..last of a run and writes the trace and
/// the tables when the last one ends. Off (first 0), it makes no profiler calls at
/// all. A profiler that cannot start (a torch built without Kineto) gives a warning
/// on stderr and in the log, and leaves the run untouched.
/// Example: StepProfiler p(opts, run_dir + "/profile", device);
///          p.begin_step(step + 1); …step…; if (auto r = p.end_step(step + 1)) print(r->text);
class StepProfiler {
 public:
  StepProfiler(ProfileOptions options, std::string dir, c10::Device device);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  /// Before step `step` (1-based): starts recording at the window's first step.
  void begin_step(int64_t step);
  /// After step `step`: at the window's last step, stops and writes the files.
  std::optional<ProfileReport> end_step(int64_t step);
  /// Stops a window the run left early (it stopped, or ended, inside it, after step
  /// `step`) and writes what was recorded; nullopt when none is open.
  std::optional<ProfileReport> finish(int64_t step);
  /// Whether the profiler records now: the loop's phase scopes exist only then.
  bool recording() const { return recording_; }

 private:
  std::optional<ProfileReport> stop(int64_t last_step);

  ProfileOptions options_;
  std::string dir_;
  c10::Device device_;
  bool recording_ = false;
  int64_t started_at_ = 0;
  std::chrono::steady_clock::time_point step_start_, window_start_;
  std::vector<double> unprofiled_ms_;  // the steps before the window, for the overhead
  std::shared_ptr<void> quiet_;  // stderr into train.log while the window is open (profiler.cpp)
};

/// A named phase of the loop (data, forward, backward, …) as a user scope in the
/// trace, or nothing when `on` is false (no RecordFunction is made).
/// Example: PhaseScope scope(profiler.recording(), "forward");
class PhaseScope {
 public:
  PhaseScope(bool on, std::string name);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  std::string name_;  // alive as long as the scope that points to it
  std::unique_ptr<at::RecordFunction> scope_;
};

/// The tables of `report` as text (top_ops.txt): one per kind, `top` rows each.
std::string format_top_ops(const ProfileReport& report, int64_t top);

}  // namespace kiln::train
