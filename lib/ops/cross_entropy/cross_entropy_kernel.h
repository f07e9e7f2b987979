// Raw-pointer entry points of the cross-entropy kernels, shared by the CPU
// capability builds, the CUDA launchers and the Tensor-level code in
// cross_entropy_cpu.cpp/cross_entropy_cuda.cpp. logits: (rows, classes) of
// `dtype`; target: (rows) class indices, checked to lie in [0, classes) before the CPU
// kernels run and by the CUDA kernels themselves (a device-side assertion);
// lse and nll: (rows) of the accumulation type (double for kDouble, else float).
#pragma once
#include <cstdint>

#include "../cpu_capability.h"
#include "../kernel_types.h"

struct CUstream_st;

namespace kiln::ops {
namespace cpu {
// One pass per row (online max and sum of exps): lse[r] = log Σ_j exp(logits[r, j])
// and nll[r] = lse[r] − logits[r, target[r]].
KILN_DECLARE_CPU_KERNEL(cross_entropy_forward,
                        (DType dtype, const void* logits, const int64_t* target, void* lse,
                         void* nll, int64_t rows, int64_t classes))
// grad_logits[r, j] = scale·(exp(logits[r, j] − lse[r]) − [j == target[r]]), scale = grad/B.
KILN_DECLARE_CPU_KERNEL(cross_entropy_backward,
                        (DType dtype, const void* logits, const int64_t* target, const void* lse,
                         void* grad_logits, int64_t rows, int64_t classes, double scale))
}  // namespace cpu

namespace cuda {
// As the CPU kernel for every row, then loss[0] = mean(nll) in `dtype` (NaN when rows = 0).
void cross_entropy_forward(DType dtype, const void* logits, const int64_t* target, void* lse,
                           void* nll, void* loss, int64_t rows, int64_t classes,
                           CUstream_st* stream);
// As the CPU kernel, with scale = grad[0]/rows read on the device (grad: one `dtype` element).
void cross_entropy_backward(DType dtype, const void* grad, const void* logits,
                            const int64_t* target, const void* lse, void* grad_logits,
                            int64_t rows, int64_t classes, CUstream_st* stream);
}  // namespace cuda
}  // namespace kiln::ops
