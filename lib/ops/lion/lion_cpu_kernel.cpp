// Vectorised CPU Lion update on raw pointers: one pass reads p, g, m once and writes
// p, m once (20 bytes per float32 parameter, AdamW's pass moves 28); compiled once per
// CPU capability (KILN_CPU_NS = base | avx2 | avx512) and chosen at run time.
#include "../cpu_dtype.h"
#include "../cpu_multi_tensor.h"
#include "lion_kernel.h"

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

template <typename V>
struct Coeffs {
  explicit Coeffs(const LionCoefficients& c)
      : neg_lr(-c.lr), decay(c.decay), beta1(c.beta1), one_minus_beta1(1 - c.beta1),
        beta2(c.beta2), one_minus_beta2(1 - c.beta2), zero(0), one(1) {}
  V neg_lr, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, zero, one;
};

// The update of one vector of elements, in the order of kiln::optim::Lion's ATen ops
// (m·β1, then + (1−β1)·g as ATen's add does it: one fused multiply-add), so float32
// results match them.
template <typename V>
inline void lion_math(V& p, const V& g, V& m, const Coeffs<V>& k) {
  const V c = at::vec::fmadd(g, k.one_minus_beta1, m * k.beta1);
  // sign(c) as ATen's sign kernel computes it: 1 where 0 < c, −1 where c < 0, else 0.
  const V u = V::blendv(k.zero, k.one, k.zero < c) - V::blendv(k.zero, k.one, c < k.zero);
  p = at::vec::fmadd(u, k.neg_lr, p * k.decay);
  m = at::vec::fmadd(g, k.one_minus_beta2, m * k.beta2);
}

}  // namespace

void lion_update(DType dtype, const TensorSpan& s, const LionCoefficients& c, Reads reads) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    using V = OpVec<T>;
    const Coeffs<V> k(c);
    update_lists<3, 0b101, T>(s.data, s.n, reads, [&](V (&x)[3]) { lion_math(x[0], x[1], x[2], k); });
  });
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
