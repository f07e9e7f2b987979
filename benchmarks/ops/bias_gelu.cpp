// bias_gelu against the unfused pair it replaces: x.add(b) then ATen's tanh GELU
// (forward), and at::gelu_backward on the saved x + b then the column sum for db
// (backward).
#include "cases.h"
#include "ops/ops.h"

KILN_BENCH_CASES(bias_gelu) {
  constexpr int64_t kN = 1024;  // features; rows = n / kN
  const int64_t rows = std::max<int64_t>(1, n / kN);
  const auto x = at::randn({rows, kN}, options) * 2, g = at::randn({rows, kN}, options);
  const auto b = at::randn({kN}, options);
  const auto z = x.add(b);  // what the unfused forward would have saved for backward
  const double bytes = static_cast<double>(x.element_size()) * x.numel();  // one (rows, kN) tensor
  return {
      {"bias_gelu", "fwd", [=] { kiln::ops::bias_gelu(x, b); }, [=] { at::gelu(x.add(b), "tanh"); },
       2 * bytes},
      {"bias_gelu", "bwd", [=] { kiln::ops::bias_gelu_backward(g, x, b); },
       [=] {
         const auto dz = at::gelu_backward(g, z, "tanh");
         dz.sum(0);
       },
       3 * bytes},
  };
}
