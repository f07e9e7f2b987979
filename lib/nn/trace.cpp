// kiln::nn::OutputTracer: the thread's active tracer and what it records.
#include "nn/trace.h"

namespace kiln::nn {

constinit thread_local OutputTracer* OutputTracer::active_ = nullptr;

OutputTracer::OutputTracer() : previous_(active_) { active_ = this; }

OutputTracer::~OutputTracer() { active_ = previous_; }

const OutputTracer::Output* OutputTracer::find(const torch::nn::Module& module) const {
  const auto it = outputs_.find(&module);
  return it == outputs_.end() ? nullptr : &it->second;
}

void OutputTracer::record(const torch::nn::Module& module, const at::Tensor& output) {
  auto& o = outputs_[&module];
  if (o.calls++ == 0) {
    o.shape = output.sizes().vec();
    o.dtype = output.scalar_type();
  }
}

}  // namespace kiln::nn
