// linear against at::addmm (forward), at::mm twice and a sum (backward), and
// linear_gelu against at::gelu(at::addmm(…), "tanh"); n is the element count of
// x: (n / 1024, 1024), with w: (1024, 1024).
#include "cases.h"
#include "ops/ops.h"

KILN_BENCH_CASES(linear) {
  constexpr int64_t K = 1024, N = 1024;
  const int64_t B = std::max<int64_t>(n / K, 1);
  const auto x = at::randn({B, K}, options), w = at::randn({N, K}, options) / 32;
  const auto b = at::randn({N}, options), g = at::randn({B, N}, options);
  return {
      {"linear", "fwd", [=] { kiln::ops::linear(x, w, b); }, [=] { at::addmm(b, x, w.t()); }},
      {"linear", "bwd", [=] { kiln::ops::linear_backward(g, x, w); },
       [=] {
         at::mm(g, w);
         at::mm(g.t(), x);
         at::sum(g, 0);
       }},
      {"linear_gelu", "fwd", [=] { kiln::ops::linear_gelu(x, w, b); },
       [=] { at::gelu(at::addmm(b, x, w.t()), "tanh"); }},
  };
}
