// Raw-pointer entry points of kiln's layer norm on the CPU, shared by the CPU
// capability builds and the Tensor-level code in layer_norm_cpu.cpp.
#pragma once
#include <cstdint>

#include "../cpu_capability.h"
#include "../kernel_types.h"

namespace kiln::ops::cpu {

// Rows [begin, end) of x (rows × c, contiguous, x_dtype): y = (x − mean)·rstd·w + b
// in y_dtype (x_dtype, or float16/bfloat16 for a float32 x: rounded once), mean and
// rstd = 1/√(var + eps) per row in the accumulation type (float32; float64 for a
// float64 x). w and b (c, x_dtype) may be null.
KILN_DECLARE_CPU_KERNEL(layer_norm_forward,
                        (DType x_dtype, DType y_dtype, const void* x, const void* w, const void* b,
                         void* y, void* mean, void* rstd, int64_t c, double eps, int64_t begin,
                         int64_t end))
// The gradients of rows [begin, end): dx (x_dtype; null: not wanted) from grad
// (g_dtype: the forward's y_dtype), x, w (null: none), mean and rstd; and this range's
// column sums of grad·x̂ and grad added into dw_acc and db_acc (c accumulation-type
// values each; null: not wanted), which the caller sums over ranges.
KILN_DECLARE_CPU_KERNEL(layer_norm_backward,
                        (DType x_dtype, DType g_dtype, const void* grad, const void* x,
                         const void* w, const void* mean, const void* rstd, void* dx, void* dw_acc,
                         void* db_acc, int64_t c, int64_t begin, int64_t end))

}  // namespace kiln::ops::cpu
