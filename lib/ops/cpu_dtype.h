// Dtype dispatch for the raw-pointer CPU kernels (*_cpu_kernel.cpp): calls f with a
// value of the C++ type of `dtype`.
#pragma once
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

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

}  // namespace kiln::ops::cpu
