// The float64 truth of the tanh GELU and its derivative for the gelu and bias_gelu
// tests. It uses the identity 0.5·x·(1 + tanh(u)) = x·σ(2u), because the tanh form
// itself cancels in the negative tail even in float64 (at::gelu(x, "tanh") returns
// -0 for x ≲ −7 where the value is ~1e-16).
#pragma once
#include <ATen/ATen.h>

namespace kiln::test {

struct GeluTruth {
  at::Tensor two_u;  // 2u = 2·√(2/π)·(x + 0.044715·x³)
  at::Tensor y;      // gelu(x)
  at::Tensor dy;     // gelu'(x)
};

/// An absolute allowance per unit of grad for gelu'(x)·grad rounded to half or bfloat16:
/// at x ≈ −0.75 the derivative's two terms (about ±0.23) cancel to 0 in float before
/// the rounding, so there its error is float's (~1e-8, and ~3e-7 with CUDA's
/// approximate exp there), not the dtype's ulp of a value near 0.
constexpr double kDerivativeSlack = 1e-6;

/// xd: float64.
inline GeluTruth gelu_truth(const at::Tensor& xd) {
  constexpr double k = 0.7978845608028654, c = 0.044715;
  const auto two_u = 2 * k * xd * (1 + c * xd * xd);
  const auto s = at::sigmoid(two_u), one_minus_s = at::sigmoid(-two_u);
  return {two_u, xd * s, s + xd * (2 * k * (1 + 3 * c * xd * xd)) * s * one_minus_s};
}

}  // namespace kiln::test
