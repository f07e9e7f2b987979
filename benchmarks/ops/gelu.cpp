// gelu against ATen's tanh GELU, forward (at::gelu) and backward (at::gelu_backward).
#include "cases.h"
#include "ops/ops.h"

KILN_BENCH_CASES(gelu) {
  const auto x = at::randn({n}, options) * 3, g = at::randn({n}, options);
  const double bytes = static_cast<double>(x.element_size()) * n;  // one tensor
  return {
      {"gelu", "fwd", [=] { kiln::ops::gelu(x); }, [=] { at::gelu(x, "tanh"); }, 2 * bytes},
      {"gelu", "bwd", [=] { kiln::ops::gelu_backward(g, x); },
       [=] { at::gelu_backward(g, x, "tanh"); }, 3 * bytes},
  };
}
