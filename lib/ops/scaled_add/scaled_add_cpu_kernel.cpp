// Vectorised CPU scaled_add on raw pointers; compiled once per CPU capability
// (KILN_CPU_NS = base | avx2 | avx512) and chosen at run time.
#include "../cpu_dtype.h"
#include "../cpu_vec.h"
#include "scaled_add_kernel.h"

#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

// The lambdas take Vectorized<opmath> explicitly, so at::vec::map converts half
// and bfloat16 through float: alpha·x + y is one fused multiply-add in float,
// rounded once (a generic lambda would be run on Vectorized<Half>, rounding
// alpha, alpha·x and the sum to half).
template <typename T>
using OpVec = at::vec::Vectorized<at::opmath_type<T>>;

template <typename T>
void forward(const T* x, const T* y, T* out, int64_t n, double alpha, Stores stores) {
  using V = OpVec<T>;
  map2_to([alpha](V xv, V yv) { return at::vec::fmadd(V(alpha), xv, yv); }, out, x, y, n, stores);
}

template <typename T>
void scale(const T* grad, T* out, int64_t n, double alpha, Stores stores) {
  using V = OpVec<T>;
  map_to([alpha](V g) { return V(alpha) * g; }, out, grad, n, stores);
}

// alpha·x + y with one side of the half type L and the other float32 (low_is_x: x is
// the half one), computed in float32; the half side is widened one float vector at a
// time (load_acc), the tail through masked loads and stores.
template <typename L>
void forward_mixed(const L* low, const float* high, float* out, int64_t n, float alpha, bool low_is_x) {
  using V = Vectorized<float>;
  const V va(alpha);
  const auto step = [&](V l, V h) { return low_is_x ? at::vec::fmadd(va, l, h) : at::vec::fmadd(va, h, l); };
  int64_t i = 0;
  for (; i + V::size() <= n; i += V::size()) step(load_acc(low + i), V::loadu(high + i)).store(out + i);
  if (i < n) step(load_acc(low + i, n - i), V::loadu(high + i, n - i)).store(out + i, n - i);
}

// out = alpha·grad rounded once to L: two float vectors to one vector of L.
template <typename L>
void scale_to(const float* grad, L* out, int64_t n, float alpha) {
  using V = Vectorized<float>;
  using VL = Vectorized<L>;
  static_assert(VL::size() == 2 * V::size());
  const V va(alpha);
  int64_t i = 0;
  for (; i + VL::size() <= n; i += VL::size())
    at::vec::convert_from_float<L>(va * V::loadu(grad + i), va * V::loadu(grad + i + V::size())).store(out + i);
  if (i < n) {
    const int64_t m = n - i, m0 = std::min<int64_t>(m, V::size());
    const V lo = V::loadu(grad + i, m0), hi = m > m0 ? V::loadu(grad + i + m0, m - m0) : V(0.0f);
    at::vec::convert_from_float<L>(va * lo, va * hi).store(out + i, m);
  }
}

// The half type of a mixed call (checked by the caller: float16 or bfloat16).
template <typename F>
void by_half_dtype(DType low, F&& f) {
  if (low == DType::kHalf) f(c10::Half{});
  else f(c10::BFloat16{});
}

}  // namespace

void scaled_add_forward_mixed(DType low, bool x_low, const void* x, const void* y, float* out,
                              int64_t n, double alpha) {
  by_half_dtype(low, [&](auto t) {
    using L = decltype(t);
    const void* l = x_low ? x : y;
    const void* h = x_low ? y : x;
    forward_mixed(static_cast<const L*>(l), static_cast<const float*>(h), out, n,
                  static_cast<float>(alpha), x_low);
  });
}

void scaled_add_scale_to(DType low, const float* grad, void* out, int64_t n, double alpha) {
  by_half_dtype(low, [&](auto t) {
    using L = decltype(t);
    scale_to(grad, static_cast<L*>(out), n, static_cast<float>(alpha));
  });
}

void scaled_add_forward(DType dtype, const void* x, const void* y, void* out, int64_t n,
                        double alpha, Stores stores) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    forward(static_cast<const T*>(x), static_cast<const T*>(y), static_cast<T*>(out), n, alpha,
            stores);
  });
}

void scaled_add_scale(DType dtype, const void* grad, void* out, int64_t n, double alpha,
                      Stores stores) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    scale(static_cast<const T*>(grad), static_cast<T*>(out), n, alpha, stores);
  });
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
