// cross_entropy against ATen: forward at::cross_entropy_loss; backward what
// ATen's autograd runs for it (nll_loss_backward then _log_softmax_backward_data,
// from the saved log-softmax). n is B·C with C = 1000 classes.
#include <algorithm>

#include "cases.h"
#include "ops/ops.h"

KILN_BENCH_CASES(cross_entropy) {
  constexpr int64_t kClasses = 1000;
  const int64_t rows = std::max<int64_t>(1, n / kClasses);
  const auto logits = at::randn({rows, kClasses}, options);
  const auto target = at::randint(0, kClasses, {rows}, options.dtype(at::kLong));
  const auto [loss, lse] = kiln::ops::cross_entropy_forward(logits, target);
  const auto g = at::ones({}, options);
  const auto logp = at::log_softmax(logits, 1);
  const auto total_weight = at::full({}, static_cast<double>(rows), options);
  const auto mean = at::Reduction::Mean;
  return {
      {"cross_entropy", "fwd", [=] { kiln::ops::cross_entropy(logits, target); },
       [=] { at::cross_entropy_loss(logits, target); }},
      {"cross_entropy", "bwd", [=] { kiln::ops::cross_entropy_backward(g, logits, target, lse); },
       [=] {
         const auto d_logp = at::nll_loss_backward(g, logp, target, {}, mean, -100, total_weight);
         at::_log_softmax_backward_data(d_logp, logp, 1, logits.scalar_type());
       }},
  };
}
