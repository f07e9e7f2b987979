// Vectorised CPU Lion update on raw pointers: one pass reads p, g, m once and writes
// p, m once (20 bytes per float32 parameter, AdamW's pass moves 28); compiled once per
// CPU capability (KILN_CPU_NS = base | avx2 | avx512) and chosen at run time.
#include "../cpu_dtype.h"
#include "lion_kernel.h"

#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <type_traits>

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

// float and double: native vectors; the tail is a partial load and store.
template <typename T>
void update(T* p, const T* g, T* m, int64_t n, const LionCoefficients& c) {
  using V = at::vec::Vectorized<T>;
  const Coeffs<V> k(c);
  int64_t i = 0;
  for (; i + V::size() <= n; i += V::size()) {
    V pv = V::loadu(p + i), mv = V::loadu(m + i);
    lion_math(pv, V::loadu(g + i), mv, k);
    pv.store(p + i), mv.store(m + i);
  }
  if (i < n) {
    const int64_t count = n - i;
    V pv = V::loadu(p + i, count), mv = V::loadu(m + i, count);
    lion_math(pv, V::loadu(g + i, count), mv, k);
    pv.store(p + i, count), mv.store(m + i, count);
  }
}

// float16 and bfloat16: each vector of T is two float vectors; computed in float,
// rounded once when stored.
template <typename T>
void update_reduced(T* p, const T* g, T* m, int64_t n, const LionCoefficients& c) {
  using V = at::vec::Vectorized<T>;
  using F = at::vec::Vectorized<float>;
  const Coeffs<F> k(c);
  for (int64_t i = 0; i < n; i += V::size()) {
    const int64_t count = std::min<int64_t>(V::size(), n - i);
    auto [p0, p1] = at::vec::convert_to_float<T>(V::loadu(p + i, count));
    auto [g0, g1] = at::vec::convert_to_float<T>(V::loadu(g + i, count));
    auto [m0, m1] = at::vec::convert_to_float<T>(V::loadu(m + i, count));
    lion_math(p0, g0, m0, k);
    lion_math(p1, g1, m1, k);
    at::vec::convert_from_float<T>(p0, p1).store(p + i, count);
    at::vec::convert_from_float<T>(m0, m1).store(m + i, count);
  }
}

}  // namespace

void lion_update(DType dtype, const TensorSpan& s, const LionCoefficients& c) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    auto* p = static_cast<T*>(s.data[0]);
    const auto* g = static_cast<const T*>(s.data[1]);
    auto* m = static_cast<T*>(s.data[2]);
    if constexpr (std::is_same_v<at::opmath_type<T>, T>) {
      update(p, g, m, s.n, c);
    } else {
      update_reduced(p, g, m, s.n, c);
    }
  });
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
