// Vectorised CPU AdamW update on raw pointers: one pass reads p, g, m, v once and
// writes p, m, v once; compiled once per CPU capability (KILN_CPU_NS = base | avx2 |
// avx512) and chosen at run time.
#include "../cpu_dtype.h"
#include "../cpu_multi_tensor.h"
#include "adamw_kernel.h"

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

// The coefficients as broadcast vectors of the arithmetic type.
template <typename V>
struct Coeffs {
  explicit Coeffs(const AdamWCoefficients& c)
      : decay(c.decay), beta1(c.beta1), one_minus_beta1(1 - c.beta1), beta2(c.beta2),
        one_minus_beta2(1 - c.beta2), step_size(c.step_size),
        inv_sqrt_bc2(c.inv_sqrt_bias_correction2), eps(c.eps) {}
  V decay, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, inv_sqrt_bc2, eps;
};

// The update of one vector of elements (see AdamWCoefficients for the maths).
template <typename V>
inline void adamw_math(V& p, const V& g, V& m, V& v, const Coeffs<V>& k) {
  p = p * k.decay;
  m = at::vec::fmadd(g, k.one_minus_beta1, m * k.beta1);
  v = at::vec::fmadd(g * g, k.one_minus_beta2, v * k.beta2);
  const V denom = at::vec::fmadd(v.sqrt(), k.inv_sqrt_bc2, k.eps);
  p = p - k.step_size * m / denom;
}

}  // namespace

void adamw_update(DType dtype, const TensorSpan& s, const AdamWCoefficients& c, Reads reads) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    using V = OpVec<T>;
    const Coeffs<V> k(c);
    update_lists<4, 0b1101, T>(s.data, s.n, reads, [&](V (&x)[4]) { adamw_math(x[0], x[1], x[2], x[3], k); });
  });
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
