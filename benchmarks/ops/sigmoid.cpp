// sigmoid against at::sigmoid(beta·x) (forward) and at::sigmoid_backward(grad·beta, s)
// (backward): what ATen needs for the documents' CustomSigmoid.
#include "cases.h"
#include "ops/ops.h"

KILN_BENCH_CASES(sigmoid) {
  constexpr double kBeta = 1.5;
  const auto x = at::randn({n}, options), g = at::randn({n}, options);
  const auto s = at::sigmoid(kBeta * x);
  return {
      {"sigmoid", "fwd", [=] { kiln::ops::sigmoid(x, kBeta); }, [=] { at::sigmoid(x * kBeta); }},
      {"sigmoid", "bwd", [=] { kiln::ops::sigmoid_backward(g, s, kBeta, std::nullopt); },
       [=] { at::sigmoid_backward(g * kBeta, s); }},
  };
}
