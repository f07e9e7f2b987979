// Vectorised CPU layer norm over the last dimension on raw pointers; compiled once
// per CPU capability (KILN_CPU_NS = base | avx2 | avx512) and chosen at run time,
// without OpenMP: layer_norm_cpu.cpp spreads the rows over threads.
// A row is widened to the accumulation type in per-thread scratch (float32, or
// float64 for float64), normalised there in two passes (the mean, then the variance
// about it: no cancellation for rows far from zero), and written in the output dtype
// with one rounding. The output dtype may be a half type for a float32 input: autocast's
// float32 residual stream normalised straight into the bfloat16 a product takes.
#include "../cpu_dtype.h"
#include "layer_norm_kernel.h"

#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <cmath>
#include <type_traits>
#include <vector>

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

template <typename A>
using VecA = at::vec::Vectorized<A>;

// dst[0, n) = src[0, n) converted (at::vec's vectorised conversions for half types).
template <typename S, typename D>
void widen(const S* src, D* dst, int64_t n) {
  if constexpr (std::is_same_v<S, D>) std::copy(src, src + n, dst);
  else at::vec::convert(src, dst, n);
}

// Σ f(x[j]) over n values, f applied a vector at a time (f(v, lanes): lanes < the
// vector's size only for the last, partial one, whose other lanes f must zero). Four
// accumulators: a row of a few hundred values is a few dozen vectors, and one chain of
// dependent adds (at::vec::reduce_all's) made the layer norm latency-bound.
template <typename A, typename F>
A sum_map(const A* x, int64_t n, F f) {
  using V = VecA<A>;
  constexpr int64_t kW = V::size();
  V a0(0), a1(0), a2(0), a3(0);
  int64_t j = 0;
  for (; j + 4 * kW <= n; j += 4 * kW) {
    a0 += f(V::loadu(x + j), kW);
    a1 += f(V::loadu(x + j + kW), kW);
    a2 += f(V::loadu(x + j + 2 * kW), kW);
    a3 += f(V::loadu(x + j + 3 * kW), kW);
  }
  for (; j + kW <= n; j += kW) a0 += f(V::loadu(x + j), kW);
  if (j < n) a1 += f(V::loadu(x + j, n - j), n - j);
  return at::vec::vec_reduce_all<A>([](V a, V b) { return a + b; }, (a0 + a1) + (a2 + a3));
}

template <typename A>
A sum_of(const A* x, int64_t n) {
  return sum_map(x, n, [](VecA<A> v, int64_t) { return v; });  // loadu(p, k) zeros the rest
}

// Σ (x − m)² over n values.
template <typename A>
A sum_sq_dev(const A* x, A m, int64_t n) {
  using V = VecA<A>;
  return sum_map(x, n, [m](V v, int64_t lanes) {
    const V d = v - V(m);
    return lanes == V::size() ? d * d : V::set(V(0), d * d, lanes);
  });
}

// n values of A from p, loaded as one vector (n < V::size(): the rest zeros).
template <typename A>
VecA<A> load_n(const A* p, int64_t n) {
  return n == VecA<A>::size() ? VecA<A>::loadu(p) : VecA<A>::loadu(p, n);
}

// The rows of x as A: x itself where X is A, else widened into scratch.
template <typename X>
struct RowsAs {
  using A = at::opmath_type<X>;
  std::vector<A> scratch;
  explicit RowsAs(int64_t c) : scratch(std::is_same_v<X, A> ? 0 : c) {}
  const A* operator()(const X* row, int64_t c) {
    if constexpr (std::is_same_v<X, A>) return row;
    else return widen(row, scratch.data(), c), scratch.data();
  }
};

template <typename X, typename Y>
void forward_rows(const X* x, const X* w, const X* b, Y* y, at::opmath_type<X>* mean,
                  at::opmath_type<X>* rstd, int64_t c, double eps, int64_t begin, int64_t end) {
  using A = at::opmath_type<X>;
  using V = VecA<A>;
  constexpr int64_t kW = V::size();
  RowsAs<X> rows_as(c);
  std::vector<A> ws(c, A(1)), bs(c, A(0));
  if (w) widen(w, ws.data(), c);
  if (b) widen(b, bs.data(), c);
  for (int64_t r = begin; r < end; ++r) {
    const A* xr = rows_as(x + r * c, c);
    const A m = sum_of(xr, c) / static_cast<A>(c);
    const A s = A(1) / std::sqrt(sum_sq_dev(xr, m, c) / static_cast<A>(c) + static_cast<A>(eps));
    mean[r] = m;
    rstd[r] = s;
    const V vm(m), vs(s);
    const auto norm = [&](int64_t j, int64_t n) {  // n ≤ kW values from j
      return at::vec::fmadd((load_n(xr + j, n) - vm) * vs, load_n(ws.data() + j, n), load_n(bs.data() + j, n));
    };
    Y* o = y + r * c;
    if constexpr (std::is_same_v<A, Y>) {
      for (int64_t j = 0; j < c; j += kW) {
        const int64_t n = std::min(kW, c - j);
        if (n == kW) norm(j, n).store(o + j);
        else norm(j, n).store(o + j, n);
      }
    } else {  // two float vectors to one of the half type, rounded once
      for (int64_t j = 0; j < c; j += 2 * kW) {
        const int64_t n = std::min(2 * kW, c - j), n0 = std::min(kW, n);
        const auto v = at::vec::convert_from_float<Y>(norm(j, n0), n > n0 ? norm(j + kW, n - n0) : V(0));
        if (n == 2 * kW) v.store(o + j);
        else v.store(o + j, n);
      }
    }
  }
}

template <typename X, typename G>
void backward_rows(const G* grad, const X* x, const X* w, const at::opmath_type<X>* mean,
                   const at::opmath_type<X>* rstd, X* dx, at::opmath_type<X>* dw, at::opmath_type<X>* db,
                   int64_t c, int64_t begin, int64_t end) {
  using A = at::opmath_type<X>;
  using V = VecA<A>;
  constexpr int64_t kW = V::size();
  RowsAs<X> x_as(c);
  RowsAs<G> g_as(c);  // G is X or a half type (whose accumulation type is float, X's)
  std::vector<A> ws(c, A(1)), dxs(dx && !std::is_same_v<A, X> ? c : 0);
  if (w) widen(w, ws.data(), c);
  const A inv_c = A(1) / static_cast<A>(c);
  for (int64_t r = begin; r < end; ++r) {
    const A* xr = x_as(x + r * c, c);
    const A* gr = g_as(grad + r * c, c);
    const A m = mean[r], s = rstd[r];
    const V vm(m), vs(s);
    // dx's row (float scratch for a half type); first it keeps g·w as rounded once, so
    // that dx subtracts its mean from the very values the mean was taken of (recomputed
    // there, the product could be fused into that subtraction unrounded: a row of one
    // value then got a gradient up to rstd·ulp(g·w), 6.6e-5, where it is exactly 0).
    A* o = nullptr;
    if (dx) {
      if constexpr (std::is_same_v<A, X>) o = dx + r * c;
      else o = dxs.data();
    }
    // a = mean of g·w, bb = mean of g·w·x̂; dw += g·x̂, db += g.
    V va(0), vb(0);
    for (int64_t j = 0; j < c; j += kW) {
      const int64_t n = std::min(kW, c - j);
      const V xh = (load_n(xr + j, n) - vm) * vs, g = load_n(gr + j, n);
      const V gw = g * load_n(ws.data() + j, n);
      if (o) n == kW ? gw.store(o + j) : gw.store(o + j, n);
      va = va + gw;
      vb = at::vec::fmadd(gw, xh, vb);
      if (dw) {
        const V d = at::vec::fmadd(g, xh, load_n(dw + j, n));
        n == kW ? d.store(dw + j) : d.store(dw + j, n);
      }
      if (db) {
        const V d = load_n(db + j, n) + g;
        n == kW ? d.store(db + j) : d.store(db + j, n);
      }
    }
    if (!o) continue;
    const A a = at::vec::vec_reduce_all<A>([](V p, V q) { return p + q; }, va) * inv_c;
    const A bb = at::vec::vec_reduce_all<A>([](V p, V q) { return p + q; }, vb) * inv_c;
    const V vaa(a), vbb(bb);
    for (int64_t j = 0; j < c; j += kW) {  // dx = rstd·(g·w − a − x̂·bb), g·w from o
      const int64_t n = std::min(kW, c - j);
      const V xh = (load_n(xr + j, n) - vm) * vs;
      const V d = vs * (load_n(o + j, n) - vaa - xh * vbb);
      n == kW ? d.store(o + j) : d.store(o + j, n);
    }
    if constexpr (!std::is_same_v<A, X>) widen(o, dx + r * c, c);
  }
}

// f(X{}, Y{}) for the pairs the op takes: one dtype, or float32 into a half type.
template <typename F>
void by_dtype_pair(DType x_dtype, DType y_dtype, F&& f) {
  if (x_dtype == DType::kFloat && y_dtype == DType::kHalf) return f(float{}, c10::Half{});
  if (x_dtype == DType::kFloat && y_dtype == DType::kBFloat16) return f(float{}, c10::BFloat16{});
  by_dtype(x_dtype, [&](auto t) { f(t, t); });
}

}  // namespace

void layer_norm_forward(DType x_dtype, DType y_dtype, const void* x, const void* w, const void* b,
                        void* y, void* mean, void* rstd, int64_t c, double eps, int64_t begin,
                        int64_t end) {
  by_dtype_pair(x_dtype, y_dtype, [&](auto xt, auto yt) {
    using X = decltype(xt);
    using Y = decltype(yt);
    using A = at::opmath_type<X>;
    forward_rows(static_cast<const X*>(x), static_cast<const X*>(w), static_cast<const X*>(b),
                 static_cast<Y*>(y), static_cast<A*>(mean), static_cast<A*>(rstd), c, eps, begin, end);
  });
}

void layer_norm_backward(DType x_dtype, DType g_dtype, const void* grad, const void* x,
                         const void* w, const void* mean, const void* rstd, void* dx, void* dw_acc,
                         void* db_acc, int64_t c, int64_t begin, int64_t end) {
  by_dtype_pair(x_dtype, g_dtype, [&](auto xt, auto gt) {
    using X = decltype(xt);
    using G = decltype(gt);
    using A = at::opmath_type<X>;
    backward_rows(static_cast<const G*>(grad), static_cast<const X*>(x), static_cast<const X*>(w),
                  static_cast<const A*>(mean), static_cast<const A*>(rstd), static_cast<X*>(dx),
                  static_cast<A*>(dw_acc), static_cast<A*>(db_acc), c, begin, end);
  });
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
