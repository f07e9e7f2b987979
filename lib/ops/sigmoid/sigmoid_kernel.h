// Raw-pointer entry points of the sigmoid kernels, shared by the CPU capability
// builds, the CUDA launcher and the Tensor-level code in sigmoid_cpu.cpp/sigmoid_cuda.cpp.
#pragma once
#include <cstdint>

#include "../cpu_capability.h"
#include "../kernel_types.h"

struct CUstream_st;

namespace kiln::ops {
namespace cpu {
// s[i] = 1 / (1 + exp(−beta·x[i])), with no overflow for any beta·x (float: within
// 4 ULP of the exact value where that is a normal float).
KILN_DECLARE_CPU_KERNEL(sigmoid_forward,
                        (DType dtype, const void* x, void* s, int64_t n, double beta, Stores stores))
// grad_x[i] = clamp(beta·s·(1−s), −clip, clip)·grad[i]; clip = +inf when there is none.
KILN_DECLARE_CPU_KERNEL(sigmoid_backward, (DType dtype, const void* grad, const void* s,
                                           void* grad_x, int64_t n, double beta, double clip,
                                           Stores stores))
}  // namespace cpu

namespace cuda {
void sigmoid_forward(DType dtype, const void* x, void* s, int64_t n, double beta,
                     CUstream_st* stream);
void sigmoid_backward(DType dtype, const void* grad, const void* s, void* grad_x, int64_t n,
                      double beta, double clip, CUstream_st* stream);
}  // namespace cuda
}  // namespace kiln::ops
