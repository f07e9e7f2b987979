// CPU kernel of kiln::fused_adamw_: every tensor's elements laid end to end and
// split over threads (cpu_for_each_span), each piece run by the vectorised update
// built for this CPU.
#include <torch/library.h>

#include "adamw_args.h"

namespace kiln::ops {
namespace {

void fused_adamw_cpu(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                     at::TensorList exp_avg_sqs, double lr, double beta1, double beta2,
                     double weight_decay, double eps, int64_t step) {
  auto a = fused_adamw_args(params, grads, exp_avgs, exp_avg_sqs, beta1, beta2, step);
  const auto c = adamw_coefficients(lr, beta1, beta2, weight_decay, eps, step);
  const auto kernel = cpu::adamw_update_impl();
  cpu_for_each_span(a, [&](const TensorSpan& s, Reads reads) { kernel(a.dtype, s, c, reads); });
  a.copy_back();
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CPU, m) { m.impl("fused_adamw_", fused_adamw_cpu); }

}  // namespace kiln::ops
