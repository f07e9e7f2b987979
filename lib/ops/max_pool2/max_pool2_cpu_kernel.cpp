// Vectorised CPU 2×2 max-pool on raw pointers; compiled once per CPU capability
// (KILN_CPU_NS = base | avx2 | avx512), without OpenMP: max_pool2_cpu.cpp spreads the
// units over threads. Channels last, a window's four positions are four vectors of
// channels, compared lane by lane; NCHW planes take a scalar loop. Half types are
// compared in float32 (widening is exact, so the choice is the half type's own).
#include "../cpu_dtype.h"
#include "../cpu_vec.h"
#include "max_pool2_kernel.h"

#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

using VecF = at::vec::Vectorized<float>;
constexpr int64_t kW = VecF::size();

// ATen's rule (MaxPoolKernel.cpp): a value replaces the best so far when it is larger
// or NaN.
template <typename T>
inline bool replaces(T v, T best) {
  return v > best || std::isnan(static_cast<float>(v));
}

template <typename X>
void forward_channels_last(const PoolShape& s, const X* x, X* y, uint8_t* code, int64_t begin, int64_t end) {
  const int64_t oh = s.oh(), ow = s.ow(), c = s.c;
  float codes[kW];
  for (int64_t u = begin; u < end; ++u) {
    const int64_t n = u / oh, r = u % oh;
    for (int64_t q = 0; q < ow; ++q) {
      const X* p00 = x + ((n * s.h + 2 * r) * s.w + 2 * q) * c;
      const X* p[4] = {p00, p00 + c, p00 + s.w * c, p00 + s.w * c + c};
      const int64_t o = ((n * oh + r) * ow + q) * c;
      for (int64_t j = 0; j < c; j += kW) {
        const int64_t m = std::min(kW, c - j);
        VecF best = load_acc(p[0] + j, m), cd(0.0f);
        for (int k = 1; k < 4; ++k) {
          const VecF v = load_acc(p[k] + j, m);
          const VecF take = (v > best) | v.isnan();
          best = VecF::blendv(best, v, take);
          cd = VecF::blendv(cd, VecF(static_cast<float>(k)), take);
        }
        store_acc(best, y + o + j, m);
        cd.store(codes);
        for (int64_t l = 0; l < m; ++l) code[o + j + l] = static_cast<uint8_t>(codes[l]);
      }
    }
  }
}

template <typename X>
void forward_planes(const PoolShape& s, const X* x, X* y, uint8_t* code, int64_t begin, int64_t end) {
  const int64_t oh = s.oh(), ow = s.ow();
  for (int64_t u = begin; u < end; ++u) {
    const X* plane = x + u * s.h * s.w;
    for (int64_t r = 0; r < oh; ++r)
      for (int64_t q = 0; q < ow; ++q) {
        const X* p = plane + 2 * r * s.w + 2 * q;
        const X v[4] = {p[0], p[1], p[s.w], p[s.w + 1]};
        int k = 0;
        for (int i = 1; i < 4; ++i)
          if (replaces(static_cast<float>(v[i]), static_cast<float>(v[k]))) k = i;
        const int64_t o = (u * oh + r) * ow + q;
        y[o] = v[k];
        code[o] = static_cast<uint8_t>(k);
      }
  }
}

template <typename X>
void backward_channels_last(const PoolShape& s, const X* grad, const uint8_t* code, X* dx, int64_t begin,
                            int64_t end) {
  const int64_t oh = s.oh(), ow = s.ow(), c = s.c;
  float codes[kW];
  const VecF zero(0.0f);
  for (int64_t u = begin; u < end; ++u) {
    const int64_t n = u / oh, r = u % oh;
    for (int64_t q = 0; q < ow; ++q) {
      X* p00 = dx + ((n * s.h + 2 * r) * s.w + 2 * q) * c;
      X* p[4] = {p00, p00 + c, p00 + s.w * c, p00 + s.w * c + c};
      const int64_t o = ((n * oh + r) * ow + q) * c;
      for (int64_t j = 0; j < c; j += kW) {
        const int64_t m = std::min(kW, c - j);
        for (int64_t l = 0; l < m; ++l) codes[l] = code[o + j + l];
        const VecF g = load_acc(grad + o + j, m), cd = VecF::loadu(codes, m);
        for (int k = 0; k < 4; ++k) store_acc(VecF::blendv(zero, g, cd == VecF(static_cast<float>(k))), p[k] + j, m);
      }
    }
    // The column past the last whole window (odd w) in this unit's two rows, and the row
    // past the last window (odd h) after the image's last unit.
    if (s.w % 2 == 1)
      for (int64_t row = 2 * r; row < 2 * r + 2; ++row)
        std::fill_n(dx + ((n * s.h + row) * s.w + s.w - 1) * c, c, X(0));
    if (s.h % 2 == 1 && r == oh - 1) std::fill_n(dx + (n * s.h + s.h - 1) * s.w * c, s.w * c, X(0));
  }
}

template <typename X>
void backward_planes(const PoolShape& s, const X* grad, const uint8_t* code, X* dx, int64_t begin, int64_t end) {
  const int64_t oh = s.oh(), ow = s.ow();
  for (int64_t u = begin; u < end; ++u) {
    X* plane = dx + u * s.h * s.w;
    std::fill_n(plane, s.h * s.w, X(0));
    for (int64_t r = 0; r < oh; ++r)
      for (int64_t q = 0; q < ow; ++q) {
        const int64_t o = (u * oh + r) * ow + q;
        const int k = code[o];
        plane[(2 * r + k / 2) * s.w + 2 * q + k % 2] = grad[o];
      }
  }
}

}  // namespace

void max_pool2_forward(DType dtype, const PoolShape& shape, const void* x, void* y, uint8_t* code, int64_t begin,
                       int64_t end) {
  by_float_dtype(dtype, [&](auto t) {
    using X = decltype(t);
    if (shape.channels_last)
      forward_channels_last(shape, static_cast<const X*>(x), static_cast<X*>(y), code, begin, end);
    else
      forward_planes(shape, static_cast<const X*>(x), static_cast<X*>(y), code, begin, end);
  });
}

void max_pool2_backward(DType dtype, const PoolShape& shape, const void* grad, const uint8_t* code, void* dx,
                        int64_t begin, int64_t end) {
  by_float_dtype(dtype, [&](auto t) {
    using X = decltype(t);
    if (shape.channels_last)
      backward_channels_last(shape, static_cast<const X*>(grad), code, static_cast<X*>(dx), begin, end);
    else
      backward_planes(shape, static_cast<const X*>(grad), code, static_cast<X*>(dx), begin, end);
  });
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
