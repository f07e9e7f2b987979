// Vectorised CPU sum of squares on raw pointers; compiled once per CPU capability
// (KILN_CPU_NS = base | avx2 | avx512) and chosen at run time.
#include "../cpu_dtype.h"
#include "../cpu_vec.h"
#include "grad_norm_kernel.h"

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

// Four independent FMA chains hide the latency; the caller hands at most a
// block of 64K elements, so each float lane adds ≲ 2K squares (AVX2; 1K with
// AVX-512) before the lanes are summed in double.
template <typename T>
double sum_squares(const T* x, int64_t n) {
  using A = Acc<T>;
  using V = Vectorized<A>;
  constexpr int64_t kW = V::size();
  V s0(A(0)), s1(A(0)), s2(A(0)), s3(A(0));
  int64_t i = 0;
  for (; i + 4 * kW <= n; i += 4 * kW) {
    const V a = load_acc(x + i), b = load_acc(x + i + kW);
    const V c = load_acc(x + i + 2 * kW), d = load_acc(x + i + 3 * kW);
    s0 = at::vec::fmadd(a, a, s0);
    s1 = at::vec::fmadd(b, b, s1);
    s2 = at::vec::fmadd(c, c, s2);
    s3 = at::vec::fmadd(d, d, s3);
  }
  for (; i + kW <= n; i += kW) {
    const V a = load_acc(x + i);
    s0 = at::vec::fmadd(a, a, s0);
  }
  if (i < n) {
    const V a = load_acc(x + i, n - i);  // the missing lanes load as zero
    s1 = at::vec::fmadd(a, a, s1);
  }
  A lanes[kW];
  ((s0 + s1) + (s2 + s3)).store(lanes);
  double total = 0;
  for (int64_t k = 0; k < kW; ++k) total += static_cast<double>(lanes[k]);
  return total;
}

}  // namespace

void grad_norm_sumsq(DType dtype, const void* x, int64_t n, double* out) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    *out = sum_squares(static_cast<const T*>(x), n);
  });
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
