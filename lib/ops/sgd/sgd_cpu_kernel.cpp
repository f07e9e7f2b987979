// Vectorised CPU SGD update on raw pointers: one pass reads p, g (and the momentum
// buffer) once and writes p (and the buffer) once: 20 bytes per float32 parameter with
// momentum, 12 without; compiled once per CPU capability (KILN_CPU_NS = base | avx2 |
// avx512) and chosen at run time. Which terms apply (weight decay, momentum, Nesterov,
// the first step) is chosen once per call, outside the loop.
#include "../cpu_dtype.h"
#include "../cpu_multi_tensor.h"
#include "sgd_kernel.h"

#include <type_traits>

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

template <bool kDecay, bool kMomentum, bool kNesterov, bool kFirst>
struct Terms {
  static constexpr bool kHasMomentum = kMomentum;
};

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

void sgd_update(DType dtype, const TensorSpan& s, const SGDCoefficients& c, Reads reads) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    using V = OpVec<T>;
    const Coeffs<V> k(c);
    with_terms(c, [&](auto terms) {
      if constexpr (decltype(terms)::kHasMomentum) {
        update_lists<3, 0b101, T>(s.data, s.n, reads, [&](V (&x)[3]) { sgd_math(x[0], x[1], x[2], k, terms); });
      } else {
        update_lists<2, 0b1, T>(s.data, s.n, reads, [&](V (&x)[2]) {
          V unused(0);
          sgd_math(x[0], x[1], unused, k, terms);
        });
      }
    });
  });
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
