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
// out[i] = alpha·x[i] + y[i] in float32 where one input is float32 and the other of the
// half type `low` (float16 or bfloat16): `x_low` says which. The half values are
// widened in registers: no float32 copy of them is made.
KILN_DECLARE_CPU_KERNEL(scaled_add_forward_mixed,
                        (DType low, bool x_low, const void* x, const void* y, float* out, int64_t n,
                         double alpha))
// out[i] = alpha·grad[i] rounded once to the half type `low`, grad float32: the
// gradient for a half-type x of a mixed scaled_add, in one pass.
KILN_DECLARE_CPU_KERNEL(scaled_add_scale_to,
                        (DType low, const float* grad, void* out, int64_t n, double alpha))
}  // namespace cpu

namespace cuda {
void scaled_add_forward(DType dtype, const void* x, const void* y, void* out, int64_t n,
                        double alpha, CUstream_st* stream);
// As cpu::scaled_add_forward_mixed: alpha·x + y in float32, one input of the half type
// `low` (x when x_low), widened as it is read.
void scaled_add_forward_mixed(DType low, bool x_low, const void* x, const void* y, float* out,
                              int64_t n, double alpha, CUstream_st* stream);
void scaled_add_scale(DType dtype, const void* grad, void* out, int64_t n, double alpha,
                      CUstream_st* stream);
// As cpu::scaled_add_scale_to: alpha·grad rounded once to the half type `low`.
void scaled_add_scale_to(DType low, const float* grad, void* out, int64_t n, double alpha,
                         CUstream_st* stream);
}  // namespace cuda
}  // namespace kiln::ops
