// Raw-pointer entry points of the fused Lion update, shared by the CPU capability
// builds, the CUDA multi-tensor launcher and the Tensor-level code; free of torch
// headers so the .cu compiles fast.
#pragma once
#include <cstdint>

#include "../cpu_capability.h"
#include "../kernel_types.h"
#include "../multi_tensor.h"

struct CUstream_st;

namespace kiln::ops {

/// The per-step constants of a Lion update (the arithmetic of kiln::optim::Lion):
///   u ← sign(β1·m + (1−β1)·g)      (sign 0 for 0, and for NaN, as ATen's sign)
///   p ← p·decay − lr·u ;  m ← β2·m + (1−β2)·g
/// with decay = 1 − lr·λ.
struct LionCoefficients {
  double lr, decay, beta1, beta2;
};

inline LionCoefficients lion_coefficients(double lr, double beta1, double beta2, double weight_decay) {
  return {lr, 1 - lr * weight_decay, beta1, beta2};
}

namespace cpu {
// Updates one span (param, grad, exp_avg) in place, any length and alignment; half
// types compute in float; `reads` as cpu_memory.h's prefetch_reads chose for the
// whole step.
KILN_DECLARE_CPU_KERNEL(lion_update, (DType dtype, const TensorSpan& span, const LionCoefficients& c, Reads reads))
}  // namespace cpu

namespace cuda {
/// Updates every span on `stream`: one kernel launch per 64 spans.
void lion_update(DType dtype, const TensorSpan* spans, int64_t count, const LionCoefficients& c,
                 CUstream_st* stream);
}  // namespace cuda

}  // namespace kiln::ops
