// Vectorised CPU batch norm on raw pointers; compiled once per CPU capability
// (KILN_CPU_NS = base | avx2 | avx512) and chosen at run time, without OpenMP:
// batch_norm_cpu.cpp spreads the runs (rows or planes, batch_norm_kernel.h) over threads.
// A half type is widened to float32 in registers; every sum is float32 within a block of at most kBlock values and float64 across
// blocks, and the statistics are shifted sums (x − a value of the channel), so neither
// a long batch nor a mean far from zero loses the variance.
#include "../cpu_dtype.h"
#include "batch_norm_kernel.h"

#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <type_traits>
#include <vector>

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

using VecF = at::vec::Vectorized<float>;
constexpr int64_t kW = VecF::size();
constexpr int64_t kBlock = 4096;  // values a block: 16 KiB of float32 scratch per stream

// n ≤ kW floats from p as one vector, zeros past n.
inline VecF load(const float* p, int64_t n) { return n == kW ? VecF::loadu(p) : VecF::loadu(p, n); }
inline void store(VecF v, float* p, int64_t n) {
  if (n == kW) v.store(p);
  else v.store(p, n);
}

// A stream of X as float32: the pointer itself for float, else the block widened into scratch.
// n ≤ kW values of X from p as float32 (zeros past n), and back with one rounding: a
// half type widened in registers, half a vector of X at a time (widening whole blocks
// into scratch first cost bfloat16 more than its halved bytes saved).
template <typename X>
inline VecF load_x(const X* p, int64_t n) {
  if constexpr (std::is_same_v<X, float>) return load(p, n);
  else return std::get<0>(at::vec::convert_to_float<X>(at::vec::Vectorized<X>::loadu(p, n)));
}
template <typename X>
inline void store_x(VecF v, X* p, int64_t n) {
  if constexpr (std::is_same_v<X, float>) store(v, p, n);
  else at::vec::convert_from_float<X>(v, v).store(p, n);
}

// The runs [begin, end) as blocks of whole runs (rows) or parts of one run (planes):
// f(first element, count, channel of the block's first element or −1 for rows).
template <typename F>
void for_each_block(const BatchNormLayout& l, int64_t begin, int64_t end, F f) {
  if (l.rows) {
    const int64_t per = std::max<int64_t>(1, kBlock / l.c);  // rows a block
    for (int64_t r = begin; r < end; r += per) f(r * l.c, std::min(per, end - r) * l.c, int64_t{-1});
  } else {
    for (int64_t p = begin; p < end; ++p)
      for (int64_t i = 0; i < l.s; i += kBlock) f(p * l.s + i, std::min(kBlock, l.s - i), p % l.c);
  }
}

// The rows loops below (here, apply, grad_input) are written out each time: one helper
// taking the vector's body as a lambda made the bfloat16 passes 12 % slower (the op
// alternated with the written-out build, kiln_bench_ops, 2 threads, twice).

// Per-channel float sums of a rows block (count / c rows) into two c-float accumulators.
template <typename G>
void rows_sums(const BatchNormLayout& l, int64_t count, float* acc0, float* acc1, G g) {
  std::fill(acc0, acc0 + l.c, 0.0f);
  std::fill(acc1, acc1 + l.c, 0.0f);
  for (int64_t r = 0; r < count / l.c; ++r)
    for (int64_t j = 0; j < l.c; j += kW) {
      const int64_t n = std::min(kW, l.c - j);
      VecF a0 = load(acc0 + j, n), a1 = load(acc1 + j, n);
      g(r * l.c + j, j, n, a0, a1);
      store(a0, acc0 + j, n);
      store(a1, acc1 + j, n);
    }
}

// The float sums of a planes block (all one channel), four accumulators each.
template <typename G>
std::pair<float, float> plane_sums(int64_t count, G g) {
  VecF a[4] = {VecF(0.0f), VecF(0.0f), VecF(0.0f), VecF(0.0f)}, b[4] = {VecF(0.0f), VecF(0.0f), VecF(0.0f), VecF(0.0f)};
  int64_t i = 0, k = 0;
  for (; i < count; i += kW, k = (k + 1) & 3) g(i, std::min(kW, count - i), a[k], b[k]);
  const auto sum = [](VecF x, VecF y) { return x + y; };
  return {at::vec::vec_reduce_all<float>(sum, (a[0] + a[1]) + (a[2] + a[3])),
          at::vec::vec_reduce_all<float>(sum, (b[0] + b[1]) + (b[2] + b[3]))};
}

template <typename X>
void stats(const BatchNormLayout& l, const X* x, const float* shift, double* sum, double* sum_sq, int64_t begin,
           int64_t end) {
  std::vector<float> acc0(l.rows ? l.c : 0), acc1(acc0.size());
  for_each_block(l, begin, end, [&](int64_t first, int64_t count, int64_t ch) {
    const X* xf = x + first;
    const auto g = [&](int64_t i, int64_t j, int64_t n, VecF& s, VecF& q) {
      const VecF d = load_x(xf + i, n) - load(shift + j, n);  // lanes past n: 0 − 0
      s += d;
      q = at::vec::fmadd(d, d, q);
    };
    if (l.rows) {
      rows_sums(l, count, acc0.data(), acc1.data(), g);
      for (int64_t j = 0; j < l.c; ++j) sum[j] += acc0[j], sum_sq[j] += acc1[j];
    } else {
      const VecF k(shift[ch]);
      const auto [s, q] = plane_sums(count, [&](int64_t i, int64_t n, VecF& a, VecF& b) {
        const VecF v = load_x(xf + i, n);
        const VecF d = n == kW ? v - k : VecF::set(VecF(0.0f), v - k, n);
        a += d;
        b = at::vec::fmadd(d, d, b);
      });
      sum[ch] += s;
      sum_sq[ch] += q;
    }
  });
}

// y = x·a + b, with relu max(0, ·) (a NaN stays NaN).
inline VecF affine(VecF x, VecF a, VecF b, bool relu) {
  const VecF y = at::vec::fmadd(x, a, b);
  return relu ? at::vec::maximum(y, VecF(0.0f)) : y;
}

template <typename X>
void apply(const BatchNormLayout& l, const X* x, const float* scale, const float* shift, bool relu, X* y,
           int64_t begin, int64_t end) {
  for_each_block(l, begin, end, [&](int64_t first, int64_t count, int64_t ch) {
    const X* xf = x + first;
    X* yf = y + first;
    if (l.rows) {
      for (int64_t r = 0; r < count / l.c; ++r)
        for (int64_t j = 0; j < l.c; j += kW) {
          const int64_t n = std::min(kW, l.c - j), i = r * l.c + j;
          store_x(affine(load_x(xf + i, n), load(scale + j, n), load(shift + j, n), relu), yf + i, n);
        }
    } else {
      const VecF a(scale[ch]), b(shift[ch]);
      for (int64_t i = 0; i < count; i += kW) {
        const int64_t n = std::min(kW, count - i);
        store_x(affine(load_x(xf + i, n), a, b, relu), yf + i, n);
      }
    }
  });
}

// dz: grad, or grad where x·a + b > 0 (the forward's pre-activation, the same FMA).
inline VecF masked_grad(VecF g, VecF x, VecF a, VecF b, bool relu) {
  return relu ? (at::vec::fmadd(x, a, b) > VecF(0.0f)) & g : g;
}

template <typename X>
void grad_sums(const BatchNormLayout& l, const X* grad, const X* x, const float* scale, const float* shift,
               const float* mean, bool relu, double* sum_dz, double* sum_dzx, int64_t begin, int64_t end) {
  std::vector<float> acc0(l.rows ? l.c : 0), acc1(acc0.size());
  for_each_block(l, begin, end, [&](int64_t first, int64_t count, int64_t ch) {
    const X* gf = grad + first;
    const X* xf = x + first;
    if (l.rows) {
      rows_sums(l, count, acc0.data(), acc1.data(), [&](int64_t i, int64_t j, int64_t n, VecF& s, VecF& q) {
        const VecF xv = load_x(xf + i, n);
        const VecF dz = masked_grad(load_x(gf + i, n), xv, load(scale + j, n), load(shift + j, n), relu);
        s += dz;
        q = at::vec::fmadd(dz, xv - load(mean + j, n), q);  // dz is 0 past n
      });
      for (int64_t j = 0; j < l.c; ++j) sum_dz[j] += acc0[j], sum_dzx[j] += acc1[j];
    } else {
      const VecF a(scale[ch]), b(shift[ch]), m(mean[ch]);
      const auto [s, q] = plane_sums(count, [&](int64_t i, int64_t n, VecF& p, VecF& r) {
        const VecF xv = load_x(xf + i, n);
        const VecF dz = masked_grad(load_x(gf + i, n), xv, a, b, relu);
        p += dz;
        r = at::vec::fmadd(dz, xv - m, r);
      });
      sum_dz[ch] += s;
      sum_dzx[ch] += q;
    }
  });
}

template <typename X>
void grad_input(const BatchNormLayout& l, const X* grad, const X* x, const float* scale, const float* shift,
                bool relu, const float* mean, const float* a, const float* k1, const float* k0, X* dx, int64_t begin,
                int64_t end) {
  for_each_block(l, begin, end, [&](int64_t first, int64_t count, int64_t ch) {
    const X* gf = grad + first;
    const X* xf = x + first;
    X* o = dx + first;
    if (l.rows) {
      for (int64_t r = 0; r < count / l.c; ++r)
        for (int64_t j = 0; j < l.c; j += kW) {
          const int64_t n = std::min(kW, l.c - j), i = r * l.c + j;
          const VecF xv = load_x(xf + i, n);
          const VecF dz = masked_grad(load_x(gf + i, n), xv, load(scale + j, n), load(shift + j, n), relu);
          const VecF d = xv - load(mean + j, n);
          store_x(at::vec::fmadd(load(a + j, n), dz, at::vec::fmadd(d, load(k1 + j, n), load(k0 + j, n))), o + i, n);
        }
    } else {
      const VecF sa(scale[ch]), sb(shift[ch]), vm(mean[ch]), va(a[ch]), v1(k1[ch]), v0(k0[ch]);
      for (int64_t i = 0; i < count; i += kW) {
        const int64_t n = std::min(kW, count - i);
        const VecF xv = load_x(xf + i, n);
        const VecF dz = masked_grad(load_x(gf + i, n), xv, sa, sb, relu);
        store_x(at::vec::fmadd(va, dz, at::vec::fmadd(xv - vm, v1, v0)), o + i, n);
      }
    }
  });
}

// f with the C++ type of a float, bfloat16 or float16 x (the Tensor-level code refuses others).
template <typename F>
void by_x_dtype(DType d, F&& f) {
  by_dtype(d, [&](auto t) {
    using X = decltype(t);
    if constexpr (!std::is_same_v<X, double>) f(t);
  });
}

}  // namespace

void batch_norm_stats(DType x_dtype, const BatchNormLayout& layout, const void* x, const float* shift, double* sum,
                      double* sum_sq, int64_t begin, int64_t end) {
  by_x_dtype(x_dtype, [&](auto t) {
    using X = decltype(t);
    stats(layout, static_cast<const X*>(x), shift, sum, sum_sq, begin, end);
  });
}

void batch_norm_apply(DType x_dtype, const BatchNormLayout& layout, const void* x, const float* scale,
                      const float* shift, bool relu, void* y, int64_t begin, int64_t end) {
  by_x_dtype(x_dtype, [&](auto t) {
    using X = decltype(t);
    apply(layout, static_cast<const X*>(x), scale, shift, relu, static_cast<X*>(y), begin, end);
  });
}

void batch_norm_grad_sums(DType x_dtype, const BatchNormLayout& layout, const void* grad, const void* x,
                          const float* scale, const float* shift, const float* mean, bool relu, double* sum_dz,
                          double* sum_dzx, int64_t begin, int64_t end) {
  by_x_dtype(x_dtype, [&](auto t) {
    using X = decltype(t);
    grad_sums(layout, static_cast<const X*>(grad), static_cast<const X*>(x), scale, shift, mean, relu, sum_dz,
              sum_dzx, begin, end);
  });
}

void batch_norm_grad_input(DType x_dtype, const BatchNormLayout& layout, const void* grad, const void* x,
                           const float* scale, const float* shift, bool relu, const float* mean, const float* a,
                           const float* k1, const float* k0, void* dx, int64_t begin, int64_t end) {
  by_x_dtype(x_dtype, [&](auto t) {
    using X = decltype(t);
    grad_input(layout, static_cast<const X*>(grad), static_cast<const X*>(x), scale, shift, relu, mean, a, k1, k0,
               static_cast<X*>(dx), begin, end);
  });
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
