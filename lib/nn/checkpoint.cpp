// kiln::nn::checkpoint: the autograd Function that keeps only a segment's inputs in
// forward and recomputes the segment, under the same RNG and autocast state, in backward.
#include "nn/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <ATen/core/ivalue.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <utility>

namespace kiln::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A generator's state (a byte tensor), read and written under its lock (see ATen's
// Note [Acquire lock when using random generators]).
at::Tensor generator_state(at::Generator g) {
  std::lock_guard<std::mutex> lock(g.mutex());
  return g.get_state();
}
void set_generator_state(at::Generator g, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_state(state);
}

// The generators a segment can draw from — the CPU one and the default generator of
// each other device among its inputs (Python's checkpoint picks the CUDA ones the
// same way) — with their states at one moment. A backend whose default generator
// is the CPU's (a test device) adds no second copy, and a meta tensor (shape
// inference, kiln summary) none at all: it has no values to draw, and no generator.
struct RngState {
  std::vector<std::pair<at::Generator, at::Tensor>> states;

  static RngState capture(at::TensorList inputs) {
    std::vector<at::Generator> generators = {at::detail::getDefaultCPUGenerator()};
    std::vector<at::Device> devices;
    for (const auto& t : inputs) {
      if (t.is_cpu() || t.is_meta() || std::count(devices.begin(), devices.end(), t.device())) continue;
      devices.push_back(t.device());
      // Through the device's hooks, so CPU-only builds link and never reach CUDA.
      auto g = at::globalContext().defaultGenerator(t.device());
      if (!std::count(generators.begin(), generators.end(), g)) generators.push_back(std::move(g));
    }
    return of(generators);
  }
  // The same generators' states now.
  RngState now() const {
    std::vector<at::Generator> generators;
    for (const auto& [g, state] : states) generators.push_back(g);
    return of(generators);
  }
  void restore() const {
    for (const auto& [g, state] : states) set_generator_state(g, state);
  }

 private:
  static RngState of(const std::vector<at::Generator>& generators) {
    RngState s;
    for (const auto& g : generators) s.states.emplace_back(g, generator_state(g));
    return s;
  }
};

// Puts the generators back to a state when the scope ends, even on an exception.
struct RestoreRngOnExit {
  RngState state;
  ~RestoreRngOnExit() { state.restore(); }
};

// Autocast's thread-local state for the device types kiln runs on: CPU, CUDA and
// a PrivateUse1 backend (the fake accelerator of the tests stands there).
constexpr std::array<at::DeviceType, 3> kAutocastDevices = {at::kCPU, at::kCUDA,
                                                           at::kPrivateUse1};

struct AutocastState {
  std::array<bool, kAutocastDevices.size()> enabled{};
  std::array<at::ScalarType, kAutocastDevices.size()> dtype{};
  bool cache_enabled = true;

  static AutocastState capture() {
    AutocastState s;
    for (size_t i = 0; i < kAutocastDevices.size(); ++i) {
      s.enabled[i] = at::autocast::is_autocast_enabled(kAutocastDevices[i]);
      s.dtype[i] = at::autocast::get_autocast_dtype(kAutocastDevices[i]);
    }
    s.cache_enabled = at::autocast::is_autocast_cache_enabled();
    return s;
  }
  void apply() const {
    for (size_t i = 0; i < kAutocastDevices.size(); ++i) {
      at::autocast::set_autocast_enabled(kAutocastDevices[i], enabled[i]);
      at::autocast::set_autocast_dtype(kAutocastDevices[i], dtype[i]);
    }
    at::autocast::set_autocast_cache_enabled(cache_enabled);
  }
};

// Applies an autocast state for the life of the scope, then the one before it.
class AutocastScope {
 public:
  explicit AutocastScope(const AutocastState& state) : before_(AutocastState::capture()) {
    state.apply();
  }
  ~AutocastScope() { before_.apply(); }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  AutocastState before_;
};

// What backward needs besides the inputs: the function and the state it ran under.
// ctx->saved_data holds IValues, so it travels as a capsule.
struct Segment : torch::CustomClassHolder {
  CheckpointFn fn;
  RngState rng;
  AutocastState autocast;
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // Function::apply runs this with grad mode off: fn builds no graph and keeps no
  // activations; only the inputs are saved.
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs, const CheckpointFn& fn) {
    auto segment = c10::make_intrusive<Segment>();
    segment->fn = fn;
    segment->rng = RngState::capture(inputs);
    segment->autocast = AutocastState::capture();
    // A weight cast cached here would have no grad_fn; with the cache off, neither
    // the recomputation nor later code in the same autocast region can reuse it.
    segment->autocast.cache_enabled = false;
    variable_list outputs;
    {
      AutocastScope autocast(segment->autocast);
      outputs = fn(inputs.vec());
    }
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["segment"] = c10::IValue::make_capsule(segment);
    ctx->set_materialize_grads(false);  // an unused output's gradient stays undefined
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto segment = c10::static_intrusive_pointer_cast<Segment>(
        ctx->saved_data["segment"].toCapsule());
    // Fresh leaves: the recomputed graph ends here, and their .grad is the answer.
    std::vector<at::Tensor> inputs;
    for (const auto& x : ctx->get_saved_variables())
      inputs.push_back(x.detach().requires_grad_(x.requires_grad()));

    variable_list outputs;
    {
      // The generators go back to where training left them after the recomputation.
      RestoreRngOnExit restore{segment->rng.now()};
      segment->rng.restore();
      AutocastScope autocast(segment->autocast);
      at::AutoGradMode grad_mode(true);
      outputs = segment->fn(inputs);
    }
    TORCH_CHECK(outputs.size() == grad_outputs.size(), "checkpoint: the recomputation returned ",
                outputs.size(), " outputs, forward returned ", grad_outputs.size(),
                " (fn must return the same number every call)");
    variable_list roots, grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (grad_outputs[i].defined() && outputs[i].defined() && outputs[i].requires_grad()) {
        roots.push_back(outputs[i]);
        grads.push_back(grad_outputs[i]);
      }
    }
    // Reentrant: parameters inside fn accumulate their .grad here.
    if (!roots.empty()) torch::autograd::backward(roots, grads);

    variable_list input_grads;
    for (const auto& x : inputs) input_grads.push_back(x.requires_grad() ? x.grad() : at::Tensor());
    input_grads.emplace_back();  // fn
    return input_grads;
  }
};

}  // namespace

std::vector<at::Tensor> checkpoint(CheckpointFn fn, const std::vector<at::Tensor>& inputs) {
  TORCH_CHECK(fn, "checkpoint: fn: expected a function, got an empty std::function");
  bool any_requires_grad = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TORCH_CHECK(inputs[i].defined(), "checkpoint: inputs[", i,
                "]: expected a defined tensor, got an undefined one");
    any_requires_grad = any_requires_grad || inputs[i].requires_grad();
  }
  // Without a gradient to route back there is no recomputation to attach: run fn
  // plainly, so parameters inside it still get their gradients.
  if (!at::GradMode::is_enabled() || !any_requires_grad) return fn(inputs);
  return CheckpointFunction::apply(at::TensorList(inputs), fn);
}

at::Tensor checkpoint(CheckpointTensorFn fn, const at::Tensor& input) {
  TORCH_CHECK(fn, "checkpoint: fn: expected a function, got an empty std::function");
  return checkpoint(
      [fn = std::move(fn)](const std::vector<at::Tensor>& xs) { return std::vector<at::Tensor>{fn(xs[0])}; },
      std::vector<at::Tensor>{input})[0];
}

at::Tensor checkpoint_segments(int64_t n, int64_t every, const at::Tensor& x, const SegmentFn& run) {
  TORCH_CHECK(every >= 0, "checkpoint_segments: every: expected ≥ 0 (0 = off), got ", every);
  if (every == 0) return run(0, n, x);
  at::Tensor y = x;
  for (int64_t begin = 0; begin < n; begin += every) {
    const int64_t end = std::min(n, begin + every);
    y = checkpoint([run, begin, end](const at::Tensor& t) { return run(begin, end, t); }, y);
  }
  return y;
}

}  // namespace kiln::nn
