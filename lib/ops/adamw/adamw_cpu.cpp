// CPU kernel of kiln::fused_adamw_: one at::parallel_for over the elements of
// every tensor laid end to end, so large tensors are split between threads and
// small ones are batched into one task; each piece runs the vectorised update
// built for this CPU.
#include <torch/library.h>

#include <algorithm>

#include "adamw_args.h"

namespace kiln::ops {
namespace {

void fused_adamw_cpu(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                     at::TensorList exp_avg_sqs, double lr, double beta1, double beta2,
                     double weight_decay, double eps, int64_t step) {
  auto a = fused_adamw_args(params, grads, exp_avgs, exp_avg_sqs, lr, beta1, beta2, weight_decay,
                            eps, step);
  // offsets[i]: where span i starts in the concatenated element range.
  std::vector<int64_t> offsets(a.spans.size() + 1, 0);
  for (size_t i = 0; i < a.spans.size(); ++i) offsets[i + 1] = offsets[i] + a.spans[i].n;
  const auto kernel = cpu::adamw_update_impl();
  const int64_t size = elem_size(a.dtype);
  at::parallel_for(0, offsets.back(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    // The span holding `begin`, then every span until `end`.
    size_t i = std::upper_bound(offsets.begin(), offsets.end(), begin) - offsets.begin() - 1;
    for (int64_t pos = begin; pos < end; ++i) {
      const auto& s = a.spans[i];
      const int64_t from = pos - offsets[i], to = std::min(end, offsets[i + 1]) - offsets[i];
      const auto shift = [&](auto* ptr) { return static_cast<char*>(const_cast<void*>(ptr)) + from * size; };
      kernel(a.dtype, AdamWSpan{shift(s.param), shift(s.grad), shift(s.exp_avg), shift(s.exp_avg_sq),
                                 to - from},
             a.coefficients);
      pos = offsets[i] + to;
    }
  });
  a.copy_back();
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CPU, m) { m.impl("fused_adamw_", fused_adamw_cpu); }

}  // namespace kiln::ops
