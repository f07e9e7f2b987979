// Raw-pointer entry points of the relu kernels, shared by the CPU capability
// builds, the CUDA launcher and the Tensor-level code in relu_cpu.cpp/relu_cuda.cpp.
#pragma once
#include <cstdint>

#include "../cpu_capability.h"
#include "../kernel_types.h"

struct CUstream_st;

namespace kiln::ops {
namespace cpu {
// y[i] = max(x[i], 0), NaN propagates as in at::relu.
KILN_DECLARE_CPU_KERNEL(relu_forward, (DType dtype, const void* x, void* y, int64_t n, Stores stores))
// grad_x[i] = y[i] > 0 ? grad[i] : 0
KILN_DECLARE_CPU_KERNEL(relu_backward,
                        (DType dtype, const void* grad, const void* y, void* grad_x, int64_t n,
                         Stores stores))
}  // namespace cpu

namespace cuda {
void relu_forward(DType dtype, const void* x, void* y, int64_t n, CUstream_st* stream);
void relu_backward(DType dtype, const void* grad, const void* y, void* grad_x, int64_t n,
                   CUstream_st* stream);
}  // namespace cuda
}  // namespace kiln::ops
