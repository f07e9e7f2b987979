// Raw-pointer entry points of the scaled_add kernels, shared by the CPU capability
// builds, the CUDA launcher and the Tensor-level code in scaled_add_cpu.cpp/scaled_add_cuda.cpp.
#pragma once
#include <cstdint>

#include "../cpu_capability.h"
#include "../kernel_types.h"

struct CUstream_st;

namespace kiln::ops {
namespace cpu {
// out[i] = alpha·x[i] + y[i], one rounding in the output dtype.
KILN_DECLARE_CPU_KERNEL(scaled_add_forward,
                        (DType dtype, const void* x, const void* y, void* out, int64_t n, double alpha,
                         Stores stores))
// out[i] = alpha·grad[i]: the gradient for x (the one for y is grad itself).
KILN_DECLARE_CPU_KERNEL(scaled_add_scale,
                        (DType dtype, const void* grad, void* out, int64_t n, double alpha, Stores stores))
}  // namespace cpu

namespace cuda {
void scaled_add_forward(DType dtype, const void* x, const void* y, void* out, int64_t n,
                        double alpha, CUstream_st* stream);
void scaled_add_scale(DType dtype, const void* grad, void* out, int64_t n, double alpha,
                      CUstream_st* stream);
}  // namespace cuda
}  // namespace kiln::ops
