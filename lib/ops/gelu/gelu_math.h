// The GELU maths shared by the CPU (at::vec) and CUDA kernels of gelu and
// bias_gelu, written once for any number-like type V and its exp.
//
// The tanh form 0.5·x·(1 + tanh(u)), u = √(2/π)·(x + 0.044715·x³), equals
// x·σ(2u) = x / (1 + e^(−2u)) exactly (1 + tanh(u) = 2σ(2u)). One exp and one
// division are cheaper than tanh and keep the error within 1e-6 relative in
// float (tests/ops/test_gelu.cpp checks the bound against float64).
#pragma once

#if defined(__CUDACC__)
#define KILN_HD __host__ __device__ __forceinline__
#else
#define KILN_HD inline
#endif

namespace kiln::ops::gelu_math {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCoeff = 0.044715;
/// Callers pass an exp that caps its argument here: e^80 ≈ 5.5e34 still fits a
/// float, so e·s below never becomes ∞·0 (gelu is below 1e-33 there anyway).
constexpr double kExpCap = 80.0;

/// a / b: the division of V itself. A caller may pass its own (the CUDA kernels
/// for half and bfloat16 pass the SFU's approximate one).
struct Divide {
  template <typename V>
  KILN_HD V operator()(V a, V b) const { return a / b; }
};

/// gelu(x) = x / (1 + exp(−2u)).
template <typename V, typename Exp, typename Div = Divide>
KILN_HD V forward(V x, Exp exp, Div div = {}) {
  const V two_u = V(2 * kSqrt2OverPi) * x * (V(1) + V(kCoeff) * x * x);
  return div(x, V(1) + exp(V(0) - two_u));
}

/// gelu'(x) = s + 2x·u'·s·(1 − s), s = σ(2u), u' = √(2/π)·(1 + 3·0.044715·x²):
/// the exact derivative of the tanh form. 1 − s is computed as e·s (e = e^(−2u)),
/// not by subtraction, which would lose digits where s is close to 1.
/// The product 2√(2/π)·x is shared by 2u and 2x·u' (one multiply fewer an element).
template <typename V, typename Exp, typename Div = Divide>
KILN_HD V derivative(V x, Exp exp, Div div = {}) {
  const V x2 = x * x;
  const V cx = V(2 * kSqrt2OverPi) * x;
  const V two_u = cx * (V(1) + V(kCoeff) * x2);
  const V x_two_du = cx * (V(1) + V(3 * kCoeff) * x2);
  const V e = exp(V(0) - two_u);
  const V s = div(V(1), V(1) + e);
  return s + x_two_du * (e * s) * s;
}

}  // namespace kiln::ops::gelu_math
