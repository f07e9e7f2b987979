// CUDA Lion: the update of one element as a functor for the multi-tensor kernel
// (multi_tensor.cuh: one launch per 64 tensors). Raw pointers and a stream only; the
// Tensor side lives in lion_cuda.cpp.
#include "../multi_tensor.cuh"
#include "lion_kernel.h"

namespace kiln::ops::cuda {
namespace {

// x = {p, g, m}, in opmath O (see LionCoefficients for the maths).
template <typename T>
struct LionOp {
  using O = opmath_t<T>;
  static constexpr int kWritten = 0b101;  // p, m
  O neg_lr, decay, beta1, one_minus_beta1, beta2, one_minus_beta2;

  __device__ __forceinline__ void operator()(T (&x)[3]) const {
    const O g = static_cast<O>(x[1]), m = static_cast<O>(x[2]);
    const O c = fma(g, one_minus_beta1, m * beta1);
    const O u = static_cast<O>((O(0) < c) - (c < O(0)));  // 0 for 0 and NaN, as ATen's sign
    x[0] = static_cast<T>(fma(u, neg_lr, static_cast<O>(x[0]) * decay));
    x[2] = static_cast<T>(fma(g, one_minus_beta2, m * beta2));
  }
};

}  // namespace

void lion_update(DType dtype, const TensorSpan* spans, int64_t count, const LionCoefficients& c,
                 CUstream_st* stream) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    using O = opmath_t<T>;
    const LionOp<T> op{O(-c.lr), O(c.decay), O(c.beta1), O(1 - c.beta1), O(c.beta2), O(1 - c.beta2)};
    multi_tensor_apply<3, T>(spans, count, op, stream);
  });
}

}  // namespace kiln::ops::cuda
