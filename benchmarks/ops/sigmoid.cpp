// sigmoid against at::sigmoid(beta·x) (forward) and at::sigmoid_backward(grad·beta, s)
// (backward): what ATen needs for the documents' CustomSigmoid.
#include "cases.h"
#include "ops/ops.h"

KILN_BENCH_CASES(sigmoid) {
  constexpr double kBeta = 1.5;
  const auto x = at::randn({n}, options), g = at::randn({n}, options);
  const auto s = at::sigmoid(kBeta * x);
  const double bytes = static_cast<double>(x.element_size()) * n;  // one tensor
  // kiln: one pass (read x, write; read grad and s, write); ATen: the scaling is a pass
  // of its own (2 tensors more each).
  return {
      {"sigmoid", "fwd", [=] { kiln::ops::sigmoid(x, kBeta); }, [=] { at::sigmoid(x * kBeta); },
       2 * bytes, {}, 4 * bytes},
      {"sigmoid", "bwd", [=] { kiln::ops::sigmoid_backward(g, s, kBeta, std::nullopt); },
       [=] { at::sigmoid_backward(g * kBeta, s); }, 3 * bytes, {}, 5 * bytes},
  };
}
