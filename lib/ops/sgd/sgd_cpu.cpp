// CPU kernel of kiln::fused_sgd_: every tensor's elements laid end to end and split
// over threads (cpu_for_each_span), each piece run by the vectorised update built for
// this CPU.
#include <torch/library.h>

#include "sgd_args.h"

namespace kiln::ops {
namespace {

void fused_sgd_cpu(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers,
                   double lr, double momentum, double dampening, double weight_decay, bool nesterov,
                   bool first_step) {
  auto a = fused_sgd_args(params, grads, momentum_buffers, momentum);
  const SGDCoefficients c{lr, momentum, dampening, weight_decay, nesterov, first_step};
  const auto kernel = cpu::sgd_update_impl();
  cpu_for_each_span(a, [&](const TensorSpan& s, Reads reads) { kernel(a.dtype, s, c, reads); });
  a.copy_back();
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CPU, m) { m.impl("fused_sgd_", fused_sgd_cpu); }

}  // namespace kiln::ops
