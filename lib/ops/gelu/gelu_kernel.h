// Raw-pointer entry points of the gelu kernels (CPU capability builds, CUDA).
#pragma once
#include <cstdint>

#include "../cpu_capability.h"
#include "../kernel_types.h"

struct CUstream_st;

namespace kiln::ops {
namespace cpu {
// y[i] = gelu(x[i])
KILN_DECLARE_CPU_KERNEL(gelu_forward, (DType dtype, const void* x, void* y, int64_t n, Stores stores))
// grad_x[i] = grad[i]·gelu'(x[i])
KILN_DECLARE_CPU_KERNEL(gelu_backward,
                        (DType dtype, const void* grad, const void* x, void* grad_x, int64_t n,
                         Stores stores))
}  // namespace cpu

namespace cuda {
void gelu_forward(DType dtype, const void* x, void* y, int64_t n, CUstream_st* stream);
void gelu_backward(DType dtype, const void* grad, const void* x, void* grad_x, int64_t n,
                   CUstream_st* stream);
}  // namespace cuda
}  // namespace kiln::ops
