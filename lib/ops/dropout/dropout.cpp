// Autograd and autocast for kiln::dropout, and random_dropout, which draws its seed.
// Backward is dropout again with the same seed and p: the same elements are dropped
// and the kept scaled by the same 1/(1 − p), so nothing but two numbers is saved (no
// mask tensor, as ATen's dropout keeps), and a gradient of a gradient (create_graph)
// is the same op once more. Under autocast dropout keeps its input's dtype.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <mutex>

#include "../autocast.h"
#include "../autograd_support.h"
#include "../ops.h"

namespace kiln::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class DropoutFunction : public torch::autograd::Function<DropoutFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, double p, int64_t seed) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->saved_data["p"] = p;
    ctx->saved_data["seed"] = seed;
    return kiln::ops::dropout(x, p, seed);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto& g = grad_outputs[0];
    if (!g.defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    return {kiln::ops::dropout(g, ctx->saved_data["p"].toDouble(), ctx->saved_data["seed"].toInt()),
            at::Tensor(), at::Tensor()};
  }
};

at::Tensor dropout_autograd(const at::Tensor& x, double p, int64_t seed) {
  return record_or_call<DropoutFunction>(&kiln::ops::dropout, x, p, seed);
}

}  // namespace

int64_t dropout_seed() {
  // The default CPU generator whatever the device: torch::manual_seed fixes the
  // masks, a checkpoint's RNG state resumes them, activation checkpointing's replay
  // draws them again, and a CUDA run drops what a CPU run drops.
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return static_cast<int64_t>(at::check_generator<at::CPUGeneratorImpl>(gen)->random64());
}

at::Tensor random_dropout(const at::Tensor& x, double p, bool training) {
  if (!training || p == 0.0) return x;
  return dropout(x, p, dropout_seed());
}

TORCH_LIBRARY_IMPL(kiln, Autograd, m) { m.impl("dropout", dropout_autograd); }

KILN_AUTOCAST_KEEP_DTYPE("dropout", kiln::ops::dropout)

}  // namespace kiln::ops
