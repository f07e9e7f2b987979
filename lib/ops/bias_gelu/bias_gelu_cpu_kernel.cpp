// Vectorised CPU bias_gelu on raw pointers, one row at a time; compiled once per
// CPU capability. Half types are converted a row at a time to float buffers, so
// every intermediate (and the db sums) stays in float.
#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <vector>

#include "../cpu_dtype.h"
#include "../cpu_exp.h"
#include "../gelu/gelu_math.h"
#include "bias_gelu_kernel.h"

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

// exp with its argument capped (gelu_math::kExpCap): cpu_exp.h's in float (2 ULP;
// gelu's forward 2.4-2.7x and backward 1.8-2.0x faster than with Sleef's, docs/ops.md),
// Sleef's 1-ULP exp in double.
constexpr auto kExp = [](auto v) { return exp_capped(v, gelu_math::kExpCap); };

// y = gelu(x + b) over one row of n opmath values.
template <typename A>
void forward_row(const A* x, const A* b, A* y, int64_t n) {
  using V = at::vec::Vectorized<A>;
  int64_t j = 0;
  for (; j + V::size() <= n; j += V::size())
    gelu_math::forward(V::loadu(x + j) + V::loadu(b + j), kExp).store(y + j);
  if (j < n) {
    const int64_t r = n - j;
    gelu_math::forward(V::loadu(x + j, r) + V::loadu(b + j, r), kExp).store(y + j, r);
  }
}

// dx = g·gelu'(x + b); db += dx, over one row.
template <typename A>
void backward_row(const A* g, const A* x, const A* b, A* dx, A* db, int64_t n) {
  using V = at::vec::Vectorized<A>;
  int64_t j = 0;
  for (; j + V::size() <= n; j += V::size()) {
    const V d = V::loadu(g + j) * gelu_math::derivative(V::loadu(x + j) + V::loadu(b + j), kExp);
    d.store(dx + j);
    (V::loadu(db + j) + d).store(db + j);
  }
  if (j < n) {
    const int64_t r = n - j;
    const V d = V::loadu(g + j, r) * gelu_math::derivative(V::loadu(x + j, r) + V::loadu(b + j, r), kExp);
    d.store(dx + j, r);
    (V::loadu(db + j, r) + d).store(db + j, r);
  }
}

// The same for a half type T straight from its rows: each vector of T widened into
// two float vectors in registers, dx rounded once when stored, db summed in float from
// the unrounded values (b already float). No row buffers: the buffered form converted
// grad and x into float rows and dx back, three more passes over L1, and ran 0.87x
// gelu_backward plus a column sum in bfloat16 at 4096 x 768 (docs/ops.md).
template <typename T>
void backward_row_half(const T* g, const T* x, const float* b, T* dx, float* db, int64_t n) {
  using V = at::vec::Vectorized<T>;
  using F = at::vec::Vectorized<float>;
  static_assert(V::size() == 2 * F::size());
  int64_t j = 0;
  for (; j + V::size() <= n; j += V::size()) {
    const auto [g0, g1] = at::vec::convert_to_float<T>(V::loadu(g + j));
    const auto [x0, x1] = at::vec::convert_to_float<T>(V::loadu(x + j));
    const F d0 = g0 * gelu_math::derivative(x0 + F::loadu(b + j), kExp);
    const F d1 = g1 * gelu_math::derivative(x1 + F::loadu(b + j + F::size()), kExp);
    at::vec::convert_from_float<T>(d0, d1).store(dx + j);
    (F::loadu(db + j) + d0).store(db + j);
    (F::loadu(db + j + F::size()) + d1).store(db + j + F::size());
  }
  if (j < n) {  // the tail through small float buffers and the float row
    const int64_t r = n - j;
    float gb[V::size()], xb[V::size()], d[V::size()];
    at::vec::convert(g + j, gb, r);
    at::vec::convert(x + j, xb, r);
    backward_row(gb, xb, b + j, d, db + j, r);
    at::vec::convert(d, dx + j, r);
  }
}

// A row of T as opmath values: the row itself when T is its own opmath type,
// else converted into `buffer`.
template <typename T, typename A = at::opmath_type<T>>
const A* as_opmath(const T* row, std::vector<A>& buffer, int64_t n) {
  if constexpr (std::is_same_v<T, A>) {
    return row;
  } else {
    at::vec::convert(row, buffer.data(), n);
    return buffer.data();
  }
}

}  // namespace

void bias_gelu_forward(DType dtype, const void* x, const void* b, void* y, int64_t rows, int64_t n) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    using A = at::opmath_type<T>;
    std::vector<A> xb(std::is_same_v<T, A> ? 0 : n), bb(xb.size()), yb(xb.size());
    const A* bv = as_opmath(static_cast<const T*>(b), bb, n);
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = static_cast<const T*>(x) + r * n;
      T* yr = static_cast<T*>(y) + r * n;
      if constexpr (std::is_same_v<T, A>) {
        forward_row(xr, bv, yr, n);
      } else {
        forward_row(as_opmath(xr, xb, n), bv, yb.data(), n);
        at::vec::convert(yb.data(), yr, n);
      }
    }
  });
}

void bias_gelu_backward(DType dtype, const void* grad, const void* x, const void* b, void* dx,
                        void* db_acc, int64_t rows, int64_t n) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    using A = at::opmath_type<T>;
    std::vector<A> bb(std::is_same_v<T, A> ? 0 : n);
    const A* bv = as_opmath(static_cast<const T*>(b), bb, n);
    A* acc = static_cast<A*>(db_acc);
    for (int64_t r = 0; r < rows; ++r) {
      const T* gr = static_cast<const T*>(grad) + r * n;
      const T* xr = static_cast<const T*>(x) + r * n;
      T* dxr = static_cast<T*>(dx) + r * n;
      if constexpr (std::is_same_v<T, A>) backward_row(gr, xr, bv, dxr, acc, n);
      else backward_row_half(gr, xr, bv, dxr, acc, n);
    }
  });
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
