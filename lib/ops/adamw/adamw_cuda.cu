// CUDA AdamW: the update of one element as a functor for the multi-tensor kernel
// (multi_tensor.cuh: one launch per 64 tensors). Raw pointers and a stream only; the
// Tensor side lives in adamw_cuda.cpp.
#include "../multi_tensor.cuh"
#include "adamw_kernel.h"

namespace kiln::ops::cuda {
namespace {

// x = {p, g, m, v}, in opmath O (see AdamWCoefficients for the maths).
template <typename T>
struct AdamWOp {
  using O = opmath_t<T>;
  static constexpr int kWritten = 0b1101;  // p, m, v
  O decay, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, inv_sqrt_bc2, eps;

  __device__ __forceinline__ void operator()(T (&x)[4]) const {
    const O g = static_cast<O>(x[1]);
    const O m = fma(g, one_minus_beta1, static_cast<O>(x[2]) * beta1);
    const O v = fma(g * g, one_minus_beta2, static_cast<O>(x[3]) * beta2);
    const O denom = fma(sqrt(v), inv_sqrt_bc2, eps);
    x[0] = static_cast<T>(static_cast<O>(x[0]) * decay - step_size * m / denom);
    x[2] = static_cast<T>(m);
    x[3] = static_cast<T>(v);
  }
};

}  // namespace

void adamw_update(DType dtype, const TensorSpan* spans, int64_t count, const AdamWCoefficients& c,
                  CUstream_st* stream) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    using O = opmath_t<T>;
    const AdamWOp<T> op{O(c.decay),     O(c.beta1),     O(1 - c.beta1),
                        O(c.beta2),     O(1 - c.beta2), O(c.step_size),
                        O(c.inv_sqrt_bias_correction2), O(c.eps)};
    multi_tensor_apply<4, T>(spans, count, op, stream);
  });
}

}  // namespace kiln::ops::cuda
