// Vectorised CPU SGD update on raw pointers: one pass reads p, g (and the momentum
// buffer) once and writes p (and the buffer) once: 20 bytes per float32 parameter with
// momentum, 12 without; compiled once per CPU capability (KILN_CPU_NS = base | avx2 |
// avx512) and chosen at run time. Which terms apply (weight decay, momentum, Nesterov,
// the first step) is chosen once per call, outside the loop.
#include "../cpu_dtype.h"
#include "sgd_kernel.h"

#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <tuple>
#include <type_traits>

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

template <bool kDecay, bool kMomentum, bool kNesterov, bool kFirst>
struct Terms {};

template <typename V>
struct Coeffs {
  explicit Coeffs(const SGDCoefficients& c)
      : neg_lr(-c.lr), momentum(c.momentum), one_minus_dampening(1 - c.dampening),
        weight_decay(c.weight_decay) {}
  V neg_lr, momentum, one_minus_dampening, weight_decay;
};

// The update of one vector of elements, in the order of torch::optim::SGD's ATen ops
// (each `a.add(b, alpha)` one fused multiply-add, as ATen's add computes it), so
// float32 results match them.
template <bool kDecay, bool kMomentum, bool kNesterov, bool kFirst, typename V>
inline void sgd_math(V& p, V d, V& b, const Coeffs<V>& k, Terms<kDecay, kMomentum, kNesterov, kFirst>) {
  if constexpr (kDecay) d = at::vec::fmadd(p, k.weight_decay, d);
  if constexpr (kMomentum) {
    if constexpr (kFirst) b = d;
    else b = at::vec::fmadd(d, k.one_minus_dampening, b * k.momentum);
    d = kNesterov ? at::vec::fmadd(b, k.momentum, d) : b;
  }
  p = at::vec::fmadd(d, k.neg_lr, p);
}

// float and double: native vectors; the tail is a partial load and store. b is null
// without momentum.
template <typename T, typename Ts>
void update(T* p, const T* g, T* b, int64_t n, const SGDCoefficients& c, Ts terms) {
  using V = at::vec::Vectorized<T>;
  const Coeffs<V> k(c);
  const auto one = [&](int64_t i, int64_t count) {
    V pv = V::loadu(p + i, count), bv = b ? V::loadu(b + i, count) : V(0);
    sgd_math(pv, V::loadu(g + i, count), bv, k, terms);
    pv.store(p + i, count);
    if (b) bv.store(b + i, count);
  };
  int64_t i = 0;
  if (b) {
    for (; i + V::size() <= n; i += V::size()) {
      V pv = V::loadu(p + i), bv = V::loadu(b + i);
      sgd_math(pv, V::loadu(g + i), bv, k, terms);
      pv.store(p + i), bv.store(b + i);
    }
  } else {
    for (; i + V::size() <= n; i += V::size()) {
      V pv = V::loadu(p + i), bv(0);
      sgd_math(pv, V::loadu(g + i), bv, k, terms);
      pv.store(p + i);
    }
  }
  if (i < n) one(i, n - i);
}

// float16 and bfloat16: each vector of T is two float vectors; computed in float,
// rounded once when stored.
template <typename T, typename Ts>
void update_reduced(T* p, const T* g, T* b, int64_t n, const SGDCoefficients& c, Ts terms) {
  using V = at::vec::Vectorized<T>;
  using F = at::vec::Vectorized<float>;
  const Coeffs<F> k(c);
  for (int64_t i = 0; i < n; i += V::size()) {
    const int64_t count = std::min<int64_t>(V::size(), n - i);
    auto [p0, p1] = at::vec::convert_to_float<T>(V::loadu(p + i, count));
    auto [g0, g1] = at::vec::convert_to_float<T>(V::loadu(g + i, count));
    F b0(0), b1(0);
    if (b) std::tie(b0, b1) = at::vec::convert_to_float<T>(V::loadu(b + i, count));
    sgd_math(p0, g0, b0, k, terms);
    sgd_math(p1, g1, b1, k, terms);
    at::vec::convert_from_float<T>(p0, p1).store(p + i, count);
    if (b) at::vec::convert_from_float<T>(b0, b1).store(b + i, count);
  }
}

// Calls f(Terms<…>{}) for the terms `c` asks for: each combination its own loop.
template <typename F>
void with_terms(const SGDCoefficients& c, F&& f) {
  const auto first = [&](auto decay, auto momentum, auto nesterov) {
    constexpr bool d = decltype(decay)::value, m = decltype(momentum)::value,
                   n = decltype(nesterov)::value;
    if (c.first_step) f(Terms<d, m, n, true>{});
    else f(Terms<d, m, n, false>{});
  };
  const auto nesterov = [&](auto decay, auto momentum) {
    if (c.nesterov) first(decay, momentum, std::true_type{});
    else first(decay, momentum, std::false_type{});
  };
  const auto momentum = [&](auto decay) {
    if (c.momentum != 0) nesterov(decay, std::true_type{});
    else first(decay, std::false_type{}, std::false_type{});
  };
  if (c.weight_decay != 0) momentum(std::true_type{});
  else momentum(std::false_type{});
}

}  // namespace

void sgd_update(DType dtype, const TensorSpan& s, const SGDCoefficients& c) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    auto* p = static_cast<T*>(s.data[0]);
    const auto* g = static_cast<const T*>(s.data[1]);
    auto* b = c.momentum != 0 ? static_cast<T*>(s.data[2]) : nullptr;
    with_terms(c, [&](auto terms) {
      if constexpr (std::is_same_v<at::opmath_type<T>, T>) {
        update(p, g, b, s.n, c, terms);
      } else {
        update_reduced(p, g, b, s.n, c, terms);
      }
    });
  });
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
