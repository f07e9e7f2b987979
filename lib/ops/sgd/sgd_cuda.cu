// CUDA SGD: the update of one element as a functor for the multi-tensor kernel
// (multi_tensor.cuh: one launch per 64 tensors); the terms are the call's flags, one
// branch each, the same for every thread. Raw pointers and a stream only; the Tensor
// side lives in sgd_cuda.cpp.
#include "../multi_tensor.cuh"
#include "sgd_kernel.h"

namespace kiln::ops::cuda {
namespace {

// x = {p, g} without momentum, {p, g, b} with it, in opmath O (see SGDCoefficients).
template <typename T, int kLists>
struct SGDOp {
  using O = opmath_t<T>;
  static constexpr int kWritten = kLists == 3 ? 0b101 : 0b1;  // p (and b)
  O neg_lr, momentum, one_minus_dampening, weight_decay;
  bool decay, nesterov, first_step;

  __device__ __forceinline__ void operator()(T (&x)[kLists]) const {
    const O p = static_cast<O>(x[0]);
    O d = static_cast<O>(x[1]);
    if (decay) d = fma(p, weight_decay, d);
    if constexpr (kLists == 3) {
      const O b = first_step ? d : fma(d, one_minus_dampening, static_cast<O>(x[2]) * momentum);
      x[2] = static_cast<T>(b);
      d = nesterov ? fma(b, momentum, d) : b;
    }
    x[0] = static_cast<T>(fma(d, neg_lr, p));
  }
};

}  // namespace

void sgd_update(DType dtype, const TensorSpan* spans, int64_t count, const SGDCoefficients& c,
                CUstream_st* stream) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    using O = opmath_t<T>;
    const O k[] = {O(-c.lr), O(c.momentum), O(1 - c.dampening), O(c.weight_decay)};
    if (c.momentum != 0)
      multi_tensor_apply<3, T>(spans, count,
                               SGDOp<T, 3>{k[0], k[1], k[2], k[3], c.weight_decay != 0, c.nesterov, c.first_step},
                               stream);
    else
      multi_tensor_apply<2, T>(spans, count,
                               SGDOp<T, 2>{k[0], k[1], k[2], k[3], c.weight_decay != 0, false, false},
                               stream);
  });
}

}  // namespace kiln::ops::cuda
