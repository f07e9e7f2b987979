// Vectorised CPU AdamW update on raw pointers: one pass reads p, g, m, v once and
// writes p, m, v once; compiled once per CPU capability (KILN_CPU_NS = base | avx2 |
// avx512) and chosen at run time.
#include "../cpu_dtype.h"
#include "adamw_kernel.h"

#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <type_traits>

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

// float and double: native vectors; the tail is a partial load and store.
template <typename T>
void update(T* p, const T* g, T* m, T* v, int64_t n, const AdamWCoefficients& c) {
  using V = at::vec::Vectorized<T>;
  const Coeffs<V> k(c);
  const auto one = [&](int64_t i, int64_t count) {
    V pv = V::loadu(p + i, count), mv = V::loadu(m + i, count), vv = V::loadu(v + i, count);
    adamw_math(pv, V::loadu(g + i, count), mv, vv, k);
    pv.store(p + i, count), mv.store(m + i, count), vv.store(v + i, count);
  };
  int64_t i = 0;
  for (; i + V::size() <= n; i += V::size()) {
    V pv = V::loadu(p + i), mv = V::loadu(m + i), vv = V::loadu(v + i);
    adamw_math(pv, V::loadu(g + i), mv, vv, k);
    pv.store(p + i), mv.store(m + i), vv.store(v + i);
  }
  if (i < n) one(i, n - i);
}

// float16 and bfloat16: each vector of T is two float vectors; computed in float,
// rounded once when stored.
template <typename T>
void update_reduced(T* p, const T* g, T* m, T* v, int64_t n, const AdamWCoefficients& c) {
  using V = at::vec::Vectorized<T>;
  using F = at::vec::Vectorized<float>;
  const Coeffs<F> k(c);
  for (int64_t i = 0; i < n; i += V::size()) {
    const int64_t count = std::min<int64_t>(V::size(), n - i);
    auto [p0, p1] = at::vec::convert_to_float<T>(V::loadu(p + i, count));
    auto [g0, g1] = at::vec::convert_to_float<T>(V::loadu(g + i, count));
    auto [m0, m1] = at::vec::convert_to_float<T>(V::loadu(m + i, count));
    auto [v0, v1] = at::vec::convert_to_float<T>(V::loadu(v + i, count));
    adamw_math(p0, g0, m0, v0, k);
    adamw_math(p1, g1, m1, v1, k);
    at::vec::convert_from_float<T>(p0, p1).store(p + i, count);
    at::vec::convert_from_float<T>(m0, m1).store(m + i, count);
    at::vec::convert_from_float<T>(v0, v1).store(v + i, count);
  }
}

}  // namespace

void adamw_update(DType dtype, const TensorSpan& s, const AdamWCoefficients& c) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    auto* p = static_cast<T*>(s.data[0]);
    const auto* g = static_cast<const T*>(s.data[1]);
    auto* m = static_cast<T*>(s.data[2]);
    auto* v = static_cast<T*>(s.data[3]);
    if constexpr (std::is_same_v<at::opmath_type<T>, T>) {
      update(p, g, m, v, s.n, c);
    } else {
      update_reduced(p, g, m, v, s.n, c);
    }
  });
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
