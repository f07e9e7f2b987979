// Vectorised CPU cross entropy on raw pointers, one row at a time; compiled once
// per CPU capability (KILN_CPU_NS = base | avx2 | avx512) and chosen at run time.
#include "../cpu_dtype.h"
#include "../cpu_vec.h"
#include "cross_entropy_kernel.h"

#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

// log Σ_j exp(x[j]) in one pass over memory. The row goes by tiles that stay in
// L1: a tile's lane-wise max first, then the running sum (per lane) is rescaled
// once to the new max and the tile's exp(x − max) are added — the online
// softmax at tile granularity, one exp per element. The running max starts at
// the lowest finite value, not −inf, so the rescale factor is never exp(−inf + inf).
template <typename T>
Acc<T> row_logsumexp(const T* x, int64_t classes) {
  using A = Acc<T>;
  using V = Vectorized<A>;
  constexpr int64_t kW = V::size();
  constexpr int64_t kTile = 16 * kW;
  const V neg_inf(-std::numeric_limits<A>::infinity());
  V m(std::numeric_limits<A>::lowest()), s(A(0));
  for (int64_t j0 = 0; j0 < classes; j0 += kTile) {
    const T* p = x + j0;
    const int64_t len = std::min(kTile, classes - j0);
    const int64_t full = len - len % kW;
    V tile_max = neg_inf, tail = neg_inf;
    for (int64_t j = 0; j < full; j += kW) tile_max = at::vec::maximum(tile_max, load_acc(p + j));
    if (full < len) {
      tail = V::set(neg_inf, load_acc(p + full, len - full), len - full);  // −inf adds exp(−inf) = 0
      tile_max = at::vec::maximum(tile_max, tail);
    }
    const V m_new = at::vec::maximum(m, tile_max);
    V s0 = s * (m - m_new).exp_u20(), s1(A(0));
    int64_t j = 0;
    for (; j + 2 * kW <= full; j += 2 * kW) {  // two chains for the FMA latency
      s0 += (load_acc(p + j) - m_new).exp_u20();
      s1 += (load_acc(p + j + kW) - m_new).exp_u20();
    }
    if (j < full) s0 += (load_acc(p + j) - m_new).exp_u20();
    if (full < len) s1 += (tail - m_new).exp_u20();
    s = s0 + s1;
    m = m_new;
  }
  // Lanes to one value: M = max over lanes, S = Σ_lanes s·exp(m − M).
  const A big = at::vec::vec_reduce_all<A>([](V a, V b) { return at::vec::maximum(a, b); }, m);
  const A sum = at::vec::vec_reduce_all<A>([](V a, V b) { return a + b; }, s * (m - V(big)).exp());
  return big + std::log(sum);
}

template <typename T>
void forward(const T* logits, const int64_t* target, Acc<T>* lse, Acc<T>* nll, int64_t rows,
             int64_t classes) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = logits + r * classes;
    lse[r] = row_logsumexp(x, classes);
    nll[r] = lse[r] - static_cast<Acc<T>>(x[target[r]]);
  }
}

// softmax·scale everywhere, then the target's element again with −scale
// (computed in Acc before its one rounding).
template <typename T>
void backward(const T* logits, const int64_t* target, const Acc<T>* lse, T* grad_logits,
              int64_t rows, int64_t classes, double scale) {
  using A = Acc<T>;
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = logits + r * classes;
    T* g = grad_logits + r * classes;
    const A l = lse[r], sc = static_cast<A>(scale);
    // Vectorized<A>, not auto: map then converts half types through float.
    using V = Vectorized<A>;
    at::vec::map([l, sc](V v) { return (v - V(l)).exp_u20() * V(sc); }, g, x, classes);
    const int64_t t = target[r];
    g[t] = static_cast<T>((std::exp(static_cast<A>(x[t]) - l) - A(1)) * sc);
  }
}

}  // namespace

void cross_entropy_forward(DType dtype, const void* logits, const int64_t* target, void* lse,
                           void* nll, int64_t rows, int64_t classes) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    forward(static_cast<const T*>(logits), target, static_cast<Acc<T>*>(lse),
            static_cast<Acc<T>*>(nll), rows, classes);
  });
}

void cross_entropy_backward(DType dtype, const void* logits, const int64_t* target,
                            const void* lse, void* grad_logits, int64_t rows, int64_t classes,
                            double scale) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    backward(static_cast<const T*>(logits), target, static_cast<const Acc<T>*>(lse),
             static_cast<T*>(grad_logits), rows, classes, scale);
  });
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
