// Dtype dispatch for the raw-pointer CPU kernels (*_cpu_kernel.cpp): calls f with a
// value of the C++ type of `dtype`.
#pragma once
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <type_traits>

#include "kernel_types.h"

namespace kiln::ops::cpu {

/// Example: by_dtype(dtype, [&](auto t) { using T = decltype(t); … });
template <typename F>
void by_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat: return f(float{});
    case DType::kDouble: return f(double{});
    case DType::kHalf: return f(c10::Half{});
    case DType::kBFloat16: return f(c10::BFloat16{});
  }
}

/// by_dtype for the kernels of float32 and the half types only (the Tensor-level code
/// refuses float64): nothing is instantiated or run for float64.
template <typename F>
void by_float_dtype(DType dtype, F&& f) {
  by_dtype(dtype, [&](auto t) {
    if constexpr (!std::is_same_v<decltype(t), double>) f(t);
  });
}

}  // namespace kiln::ops::cpu
