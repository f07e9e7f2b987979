// scaled_add against at::add(y, x, alpha) (forward) and the (alpha·grad, grad)
// that ATen's add backward produces (at::mul; the y gradient is grad itself).
#include "cases.h"
#include "ops/ops.h"

KILN_BENCH_CASES(scaled_add) {
  constexpr double kAlpha = 2.0;
  const auto x = at::randn({n}, options), y = at::randn({n}, options), g = at::randn({n}, options);
  const double bytes = static_cast<double>(x.element_size()) * n;  // one tensor
  return {
      {"scaled_add", "fwd", [=] { kiln::ops::scaled_add(x, y, kAlpha); },
       [=] { at::add(y, x, kAlpha); }, 3 * bytes},  // read x, y; write the sum
      {"scaled_add", "bwd", [=] { kiln::ops::scaled_add_backward(g, kAlpha); },
       [=] { at::mul(g, kAlpha); }, 2 * bytes},  // read grad, write alpha·grad (y's is grad itself)
  };
}
