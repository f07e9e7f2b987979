// Vectorised CPU sigmoid on raw pointers; compiled once per CPU capability
// (KILN_CPU_NS = base | avx2 | avx512) and chosen at run time.
#include "../cpu_dtype.h"
#include "sigmoid_kernel.h"

#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

// Stable sigmoid of z = beta·x: with e = exp(−|z|) ≤ 1 nothing overflows, and
// s = 1/(1+e) for z ≥ 0, e/(1+e) for z < 0 keeps full relative precision in the
// tail (1/(1+exp(−z)) would compute exp(+large) there). NaN propagates through e.
template <typename V>
V stable_sigmoid(V z) {
  const V one(1);
  const V e = z.abs().neg().exp_u20();
  const V s = V::blendv(one, e, z < V(0)) / (one + e);
  return V::blendv(s, z, z != z);  // exp_u20 clamps NaN to a finite value
}

// The lambdas take Vectorized<opmath> explicitly: at::vec::map then converts half
// and bfloat16 through float (a generic lambda would be run on Vectorized<Half>,
// rounding every intermediate, and beta itself, to half).
template <typename T>
using OpVec = at::vec::Vectorized<at::opmath_type<T>>;

template <typename T>
void forward(const T* x, T* s, int64_t n, double beta) {
  using V = OpVec<T>;
  at::vec::map([beta](V v) { return stable_sigmoid(v * V(beta)); }, s, x, n);
}

// The local derivative beta·s·(1−s), clamped to ±clip, times grad.
template <typename T>
void backward(const T* grad, const T* s, T* grad_x, int64_t n, double beta, double clip) {
  using V = OpVec<T>;
  at::vec::map2(
      [beta, clip](V g, V sv) {
        const V local = V(beta) * sv * (V(1) - sv);
        return at::vec::clamp(local, V(-clip), V(clip)) * g;
      },
      grad_x, grad, s, n);
}

}  // namespace

void sigmoid_forward(DType dtype, const void* x, void* s, int64_t n, double beta) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    forward(static_cast<const T*>(x), static_cast<T*>(s), n, beta);
  });
}

void sigmoid_backward(DType dtype, const void* grad, const void* s, void* grad_x, int64_t n,
                      double beta, double clip) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    backward(static_cast<const T*>(grad), static_cast<const T*>(s), static_cast<T*>(grad_x), n,
             beta, clip);
  });
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
