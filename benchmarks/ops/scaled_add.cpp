// scaled_add against at::add(y, x, alpha) (forward) and the (alpha·grad, grad)
// that ATen's add backward produces (at::mul; the y gradient is grad itself); with
// --dtypes float32 also the mixed pair autocast's residual stream makes (a bfloat16 x,
// a float32 y: "mixed-fwd", and x's bfloat16 gradient: "mixed-bwd") against ATen's add
// of the same pair and its gradient's multiply and cast.
#include "cases.h"
#include "ops/ops.h"

KILN_BENCH_CASES(scaled_add) {
  constexpr double kAlpha = 2.0;
  const auto x = at::randn({n}, options), y = at::randn({n}, options), g = at::randn({n}, options);
  const double bytes = static_cast<double>(x.element_size()) * n;  // one tensor
  std::vector<kiln::bench::Case> mixed;
  if (options.dtype() == at::kFloat) {
    const auto xb = x.to(at::kBFloat16);
    const double half = bytes / 2;  // one bfloat16 tensor
    mixed = {
        {"scaled_add", "mixed-fwd", [=] { kiln::ops::scaled_add(xb, y, kAlpha); },
         [=] { at::add(y, xb, kAlpha); }, half + 2 * bytes},  // read x (bf16), y; write the sum
        {"scaled_add", "mixed-bwd", [=] { kiln::ops::scaled_add_backward(g, kAlpha, at::kBFloat16); },
         [=] { at::mul(g, kAlpha).to(at::kBFloat16); }, bytes + half},  // read grad, write bf16
    };
  }
  std::vector<kiln::bench::Case> cases = {
      {"scaled_add", "fwd", [=] { kiln::ops::scaled_add(x, y, kAlpha); },
       [=] { at::add(y, x, kAlpha); }, 3 * bytes},  // read x, y; write the sum
      {"scaled_add", "bwd", [=] { kiln::ops::scaled_add_backward(g, kAlpha); },
       [=] { at::mul(g, kAlpha); }, 2 * bytes},  // read grad, write alpha·grad (y's is grad itself)
  };
  cases.insert(cases.end(), mixed.begin(), mixed.end());
  return cases;
}
