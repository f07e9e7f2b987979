// Vectorised CPU scaled_add on raw pointers; compiled once per CPU capability
// (KILN_CPU_NS = base | avx2 | avx512) and chosen at run time.
#include "scaled_add_kernel.h"

#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

// at::vec::map2 hands float vectors to the lambda for half and bfloat16, so
// alpha·x + y is one fused multiply-add in float, rounded once.
template <typename T>
void forward(const T* x, const T* y, T* out, int64_t n, double alpha) {
  at::vec::map2(
      [alpha](auto xv, auto yv) {
        using V = decltype(xv);
        return at::vec::fmadd(V(alpha), xv, yv);
      },
      out, x, y, n);
}

template <typename T>
void scale(const T* grad, T* out, int64_t n, double alpha) {
  at::vec::map([alpha](auto g) { return decltype(g)(alpha) * g; }, out, grad, n);
}

template <typename F>
void by_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat: return f(float{});
    case DType::kDouble: return f(double{});
    case DType::kHalf: return f(c10::Half{});
    case DType::kBFloat16: return f(c10::BFloat16{});
  }
}

}  // namespace

void scaled_add_forward(DType dtype, const void* x, const void* y, void* out, int64_t n,
                        double alpha) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    forward(static_cast<const T*>(x), static_cast<const T*>(y), static_cast<T*>(out), n, alpha);
  });
}

void scaled_add_scale(DType dtype, const void* grad, void* out, int64_t n, double alpha) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    scale(static_cast<const T*>(grad), static_cast<T*>(out), n, alpha);
  });
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
