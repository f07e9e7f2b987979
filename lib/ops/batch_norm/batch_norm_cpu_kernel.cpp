// Vectorised CPU batch norm on raw pointers; compiled once per CPU capability
// (KILN_CPU_NS = base | avx2 | avx512) and chosen at run time, without OpenMP:
// batch_norm_cpu.cpp spreads the runs (rows or planes, batch_norm_kernel.h) over threads.
// A half type is widened to float32 in registers; every sum is float32 within a block
// of at most kBlock values and float64 across blocks, and the statistics are shifted
// sums (x − a value of the channel), so neither a long batch nor a mean far from zero
// loses the variance.
#include "../cpu_dtype.h"
#include "../cpu_vec.h"
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
constexpr int64_t kBlock = 4096;  // values a block: its float32 sums are flushed to float64

// Values come in through load_acc and go out through store_acc (cpu_vec.h): a half
// type widened in registers and rounded once. Widening whole blocks into scratch first,
// the op's first version, cost bfloat16 more than its halved bytes saved.

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
      VecF a0 = load_acc(acc0 + j, n), a1 = load_acc(acc1 + j, n);
      g(r * l.c + j, j, n, a0, a1);
      store_acc(a0, acc0 + j, n);
      store_acc(a1, acc1 + j, n);
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
      const VecF d = load_acc(xf + i, n) - load_acc(shift + j, n);  // lanes past n: 0 − 0
      s += d;
      q = at::vec::fmadd(d, d, q);
    };
    if (l.rows) {
      rows_sums(l, count, acc0.data(), acc1.data(), g);
      for (int64_t j = 0; j < l.c; ++j) sum[j] += acc0[j], sum_sq[j] += acc1[j];
    } else {
      const VecF k(shift[ch]);
      const auto [s, q] = plane_sums(count, [&](int64_t i, int64_t n, VecF& a, VecF& b) {
        const VecF v = load_acc(xf + i, n);
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
          const VecF v = affine(load_acc(xf + i, n), load_acc(scale + j, n), load_acc(shift + j, n), relu);
          store_acc(v, yf + i, n);
        }
    } else {
      const VecF a(scale[ch]), b(shift[ch]);
      for (int64_t i = 0; i < count; i += kW) {
        const int64_t n = std::min(kW, count - i);
        store_acc(affine(load_acc(xf + i, n), a, b, relu), yf + i, n);
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
        const VecF xv = load_acc(xf + i, n);
        const VecF dz =
            masked_grad(load_acc(gf + i, n), xv, load_acc(scale + j, n), load_acc(shift + j, n), relu);
        s += dz;
        q = at::vec::fmadd(dz, xv - load_acc(mean + j, n), q);  // dz is 0 past n
      });
      for (int64_t j = 0; j < l.c; ++j) sum_dz[j] += acc0[j], sum_dzx[j] += acc1[j];
    } else {
      const VecF a(scale[ch]), b(shift[ch]), m(mean[ch]);
      const auto [s, q] = plane_sums(count, [&](int64_t i, int64_t n, VecF& p, VecF& r) {
        const VecF xv = load_acc(xf + i, n);
        const VecF dz = masked_grad(load_acc(gf + i, n), xv, a, b, relu);
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
          const VecF xv = load_acc(xf + i, n);
          const VecF dz =
              masked_grad(load_acc(gf + i, n), xv, load_acc(scale + j, n), load_acc(shift + j, n), relu);
          const VecF rest = at::vec::fmadd(xv - load_acc(mean + j, n), load_acc(k1 + j, n), load_acc(k0 + j, n));
          store_acc(at::vec::fmadd(load_acc(a + j, n), dz, rest), o + i, n);
        }
    } else {
      const VecF sa(scale[ch]), sb(shift[ch]), vm(mean[ch]), va(a[ch]), v1(k1[ch]), v0(k0[ch]);
      for (int64_t i = 0; i < count; i += kW) {
        const int64_t n = std::min(kW, count - i);
        const VecF xv = load_acc(xf + i, n);
        const VecF dz = masked_grad(load_acc(gf + i, n), xv, sa, sb, relu);
        store_acc(at::vec::fmadd(va, dz, at::vec::fmadd(xv - vm, v1, v0)), o + i, n);
      }
    }
  });
}

}  // namespace

void batch_norm_stats(DType x_dtype, const BatchNormLayout& layout, const void* x, const float* shift, double* sum,
                      double* sum_sq, int64_t begin, int64_t end) {
  by_float_dtype(x_dtype, [&](auto t) {
    using X = decltype(t);
    stats(layout, static_cast<const X*>(x), shift, sum, sum_sq, begin, end);
  });
}

void batch_norm_apply(DType x_dtype, const BatchNormLayout& layout, const void* x, const float* scale,
                      const float* shift, bool relu, void* y, int64_t begin, int64_t end) {
  by_float_dtype(x_dtype, [&](auto t) {
    using X = decltype(t);
    apply(layout, static_cast<const X*>(x), scale, shift, relu, static_cast<X*>(y), begin, end);
  });
}

void batch_norm_grad_sums(DType x_dtype, const BatchNormLayout& layout, const void* grad, const void* x,
                          const float* scale, const float* shift, const float* mean, bool relu, double* sum_dz,
                          double* sum_dzx, int64_t begin, int64_t end) {
  by_float_dtype(x_dtype, [&](auto t) {
    using X = decltype(t);
    grad_sums(layout, static_cast<const X*>(grad), static_cast<const X*>(x), scale, shift, mean, relu, sum_dz,
              sum_dzx, begin, end);
  });
}

void batch_norm_grad_input(DType x_dtype, const BatchNormLayout& layout, const void* grad, const void* x,
                           const float* scale, const float* shift, bool relu, const float* mean, const float* a,
                           const float* k1, const float* k0, void* dx, int64_t begin, int64_t end) {
  by_float_dtype(x_dtype, [&](auto t) {
    using X = decltype(t);
    grad_input(layout, static_cast<const X*>(grad), static_cast<const X*>(x), scale, shift, relu, mean, a, k1, k0,
               static_cast<X*>(dx), begin, end);
  });
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
