// CUDA scaled_add: the device maths and its launchers on raw pointers and a stream
// (the Tensor side lives in scaled_add_cuda.cpp, so this file sees no ATen).
#include "../cuda_support.cuh"
#include "scaled_add_kernel.h"

namespace kiln::ops::cuda {
namespace {

// alpha·x + y in opmath, rounded once.
template <typename T>
struct ScaledAdd {
  opmath_t<T> alpha;
  __device__ T operator()(T x, T y) const {
    using A = opmath_t<T>;
    return static_cast<T>(alpha * static_cast<A>(x) + static_cast<A>(y));
  }
};

// alpha·x + y in float32, one of them float32 and the other a half type widened as it
// is read: one fused multiply-add, as on float32 copies of both.
struct ScaledAddMixed {
  float alpha;
  template <typename X, typename Y>
  __device__ float operator()(X x, Y y) const {
    return alpha * static_cast<float>(x) + static_cast<float>(y);
  }
};

// alpha·grad in opmath.
template <typename T>
struct Scale {
  opmath_t<T> alpha;
  __device__ T operator()(T g) const { return static_cast<T>(alpha * static_cast<opmath_t<T>>(g)); }
};

// alpha·grad in float, rounded once to the half type L.
template <typename L>
struct ScaleTo {
  float alpha;
  __device__ L operator()(float g) const { return static_cast<L>(alpha * g); }
};

}  // namespace

void scaled_add_forward(DType dtype, const void* x, const void* y, void* out, int64_t n,
                        double alpha, CUstream_st* stream) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    launch_map2(ScaledAdd<T>{static_cast<opmath_t<T>>(alpha)}, static_cast<const T*>(x),
                static_cast<const T*>(y), static_cast<T*>(out), n, stream);
  });
}

void scaled_add_forward_mixed(DType low, bool x_low, const void* x, const void* y, float* out,
                              int64_t n, double alpha, CUstream_st* stream) {
  by_dtype(low, [&](auto t) {
    using L = decltype(t);
    if constexpr (sizeof(L) == 2) {
      const ScaledAddMixed op{static_cast<float>(alpha)};
      if (x_low)
        launch_map2(op, static_cast<const L*>(x), static_cast<const float*>(y), out, n, stream);
      else
        launch_map2(op, static_cast<const float*>(x), static_cast<const L*>(y), out, n, stream);
    }
  });
}

void scaled_add_scale(DType dtype, const void* grad, void* out, int64_t n, double alpha,
                      CUstream_st* stream) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    launch_map1(Scale<T>{static_cast<opmath_t<T>>(alpha)}, static_cast<const T*>(grad),
                static_cast<T*>(out), n, stream);
  });
}

void scaled_add_scale_to(DType low, const float* grad, void* out, int64_t n, double alpha,
                         CUstream_st* stream) {
  by_dtype(low, [&](auto t) {
    using L = decltype(t);
    if constexpr (sizeof(L) == 2)
      launch_map1(ScaleTo<L>{static_cast<float>(alpha)}, grad, static_cast<L*>(out), n, stream);
  });
}

}  // namespace kiln::ops::cuda
