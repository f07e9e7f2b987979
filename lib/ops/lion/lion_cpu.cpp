// CPU kernel of kiln::fused_lion_: every tensor's elements laid end to end and split
// over threads (cpu_for_each_span), each piece run by the vectorised update built for
// this CPU.
#include <torch/library.h>

#include "lion_args.h"

namespace kiln::ops {
namespace {

void fused_lion_cpu(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                    double lr, double beta1, double beta2, double weight_decay) {
  auto a = fused_lion_args(params, grads, exp_avgs, beta1, beta2);
  const auto c = lion_coefficients(lr, beta1, beta2, weight_decay);
  const auto kernel = cpu::lion_update_impl();
  cpu_for_each_span(a, [&](const TensorSpan& s, Reads reads) { kernel(a.dtype, s, c, reads); });
  a.copy_back();
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CPU, m) { m.impl("fused_lion_", fused_lion_cpu); }

}  // namespace kiln::ops
