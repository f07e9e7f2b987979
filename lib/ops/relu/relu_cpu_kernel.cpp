// Vectorised CPU relu on raw pointers; compiled once per CPU capability
// (KILN_CPU_NS = base | avx2 | avx512) and chosen at run time.
#include "../cpu_dtype.h"
#include "../cpu_vec.h"
#include "relu_kernel.h"

#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

// at::vec::map hands float vectors to the lambda for half and bfloat16 (the
// computation happens in float), and native vectors for float and double.
template <typename T>
void forward(const T* x, T* y, int64_t n, Stores stores) {
  map_to([](auto v) { return at::vec::clamp_min(v, decltype(v)(0)); }, y, x, n, stores);
}

template <typename T>
void backward(const T* grad, const T* y, T* grad_x, int64_t n, Stores stores) {
  map2_to(
      [](auto g, auto out) {
        using V = decltype(g);
        return V::blendv(V(0), g, out > V(0));
      },
      grad_x, grad, y, n, stores);
}

}  // namespace

void relu_forward(DType dtype, const void* x, void* y, int64_t n, Stores stores) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    forward(static_cast<const T*>(x), static_cast<T*>(y), n, stores);
  });
}

void relu_backward(DType dtype, const void* grad, const void* y, void* grad_x, int64_t n,
                   Stores stores) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    backward(static_cast<const T*>(grad), static_cast<const T*>(y), static_cast<T*>(grad_x), n,
             stores);
  });
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
