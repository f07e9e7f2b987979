// Vectorised CPU sigmoid on raw pointers; compiled once per CPU capability
// (KILN_CPU_NS = base | avx2 | avx512) and chosen at run time.
#include "../cpu_dtype.h"
#include "../cpu_exp.h"
#include "../cpu_vec.h"
#include "sigmoid_kernel.h"

#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <type_traits>

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

// Stable sigmoid of z = beta·x: with e = exp(−|z|) ≤ 1 nothing overflows, and
// s = 1/(1+e) for z ≥ 0, e/(1+e) for z < 0 keeps full relative precision in the
// tail (1/(1+exp(−z)) would compute exp(+large) there). NaN propagates through e.
// The double kernels use it; float (and half types, computed in float) use
// sigmoid_of_neg below.
template <typename V>
V stable_sigmoid(V z) {
  const V one(1);
  const V e = z.abs().neg().exp_u20();
  const V s = V::blendv(one, e, z < V(0)) / (one + e);
  return V::blendv(s, z, z != z);  // exp_u20 clamps NaN to a finite value
}

// sigmoid(z) = 1/(1+exp(t)) for t = −z, in float. With exp_clamped (cpu_exp.h) and
// none of the stable form's abs, compares, blends and exp_u20's floor and conversion,
// it is about 1.5x fewer instructions: enough to keep up with memory at one thread
// (docs/ops.md). Within 4 ULP of the exact sigmoid wherever that is a normal float
// (the stable form with exp_u20 gave 0 just above z = −87.3, a normal 1.2e-38):
// 1/(1+e) loses no relative precision for a large e, so the negative tail keeps it.
// From t = 88.38 on e is +inf and s = 0 (the exact value is at most 4.2e-39 there); below
// t = −87, s rounds to 1 either way. NaN propagates through exp_clamped.
inline VecF sigmoid_of_neg(VecF t) { return VecF(1.0f) / (VecF(1.0f) + exp_clamped(t)); }

// The lambdas take Vectorized<opmath> explicitly: at::vec::map then converts half
// and bfloat16 through float (a generic lambda would be run on Vectorized<Half>,
// rounding every intermediate, and beta itself, to half).
template <typename T>
using OpVec = at::vec::Vectorized<at::opmath_type<T>>;

template <typename T>
void forward(const T* x, T* s, int64_t n, double beta, Stores stores) {
  using V = OpVec<T>;
  if constexpr (std::is_same_v<V, VecF>) {
    const float neg_beta = static_cast<float>(-beta);
    map_to([neg_beta](VecF v) { return sigmoid_of_neg(v * VecF(neg_beta)); }, s, x, n, stores);
  } else {
    map_to([beta](V v) { return stable_sigmoid(v * V(beta)); }, s, x, n, stores);
  }
}

// The local derivative beta·s·(1−s), clamped to ±clip, times grad.
template <typename T>
void backward(const T* grad, const T* s, T* grad_x, int64_t n, double beta, double clip,
              Stores stores) {
  using V = OpVec<T>;
  map2_to(
      [beta, clip](V g, V sv) {
        const V local = V(beta) * sv * (V(1) - sv);
        return at::vec::clamp(local, V(-clip), V(clip)) * g;
      },
      grad_x, grad, s, n, stores);
}

}  // namespace

void sigmoid_forward(DType dtype, const void* x, void* s, int64_t n, double beta, Stores stores) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    forward(static_cast<const T*>(x), static_cast<T*>(s), n, beta, stores);
  });
}

void sigmoid_backward(DType dtype, const void* grad, const void* s, void* grad_x, int64_t n,
                      double beta, double clip, Stores stores) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    backward(static_cast<const T*>(grad), static_cast<const T*>(s), static_cast<T*>(grad_x), n,
             beta, clip, stores);
  });
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
