// What each module's forward returned, for `kiln summary`: libtorch's C++ modules
// have no forward hooks, so kiln's modules report their output (and the output of
// the libtorch modules they call: Conv2d, BatchNorm2d, Embedding) to the tracer
// active on this thread. With none active a report is one thread-local load and a
// branch.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace kiln::nn {

/// Records, while it lives, the first output of every module whose forward runs on
/// this thread (tracers nest: the innermost records).
/// Example: kiln::nn::OutputTracer tracer; model->forward(x); tracer.find(*model->layers[0])->shape;
class OutputTracer {
 public:
  struct Output {
    std::vector<int64_t> shape;
    at::ScalarType dtype = at::kFloat;
    int64_t calls = 0;  // how often the module's forward ran
  };

  OutputTracer();
  ~OutputTracer();
  OutputTracer(const OutputTracer&) = delete;
  OutputTracer& operator=(const OutputTracer&) = delete;

  /// The output `module` reported, or nullptr when its forward did not run.
  const Output* find(const torch::nn::Module& module) const;
  /// Called through traced(); keeps the first output's shape and dtype, counts the calls.
  void record(const torch::nn::Module& module, const at::Tensor& output);

  /// The tracer recording on this thread, or nullptr.
  static OutputTracer* active() { return active_; }

 private:
  std::unordered_map<const torch::nn::Module*, Output> outputs_;
  OutputTracer* previous_;
  static constinit thread_local OutputTracer* active_;
};

/// Reports `output` as what `module`'s forward returned and passes it through
/// (moved: no reference count changes hands).
/// Example: return traced(*this, kiln::ops::linear(x, weight, bias));
inline at::Tensor traced(const torch::nn::Module& module, at::Tensor output) {
  if (OutputTracer* tracer = OutputTracer::active()) [[unlikely]]
    tracer->record(module, output);
  return output;
}

}  // namespace kiln::nn
