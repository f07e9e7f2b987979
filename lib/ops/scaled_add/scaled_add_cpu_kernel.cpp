// Vectorised CPU scaled_add on raw pointers; compiled once per CPU capability
// (KILN_CPU_NS = base | avx2 | avx512) and chosen at run time.
#include "../cpu_dtype.h"
#include "../cpu_vec.h"
#include "scaled_add_kernel.h"

#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

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

}  // namespace

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
