// Raw-pointer entry points of the fused SGD update, shared by the CPU capability
// builds, the CUDA multi-tensor launcher and the Tensor-level code; free of torch
// headers so the .cu compiles fast.
#pragma once
#include <cstdint>

#include "../cpu_capability.h"
#include "../kernel_types.h"
#include "../multi_tensor.h"

struct CUstream_st;

namespace kiln::ops {

/// The constants of an SGD update (the arithmetic of torch::optim::SGD):
///   d ← g + λ·p                                        (weight_decay λ ≠ 0)
///   b ← d on the first step, else μ·b + (1−τ)·d        (momentum μ ≠ 0, dampening τ)
///   d ← d + μ·b with Nesterov, else b                  (momentum μ ≠ 0)
///   p ← p − lr·d
struct SGDCoefficients {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, first_step;
};

namespace cpu {
// Updates one span (param, grad, and with momentum the buffer) in place, any length
// and alignment; half types compute in float; `reads` as cpu_memory.h's prefetch_reads
// chose for the whole step.
KILN_DECLARE_CPU_KERNEL(sgd_update, (DType dtype, const TensorSpan& span, const SGDCoefficients& c, Reads reads))
}  // namespace cpu

namespace cuda {
/// Updates every span on `stream`: one kernel launch per 64 spans.
void sgd_update(DType dtype, const TensorSpan* spans, int64_t count, const SGDCoefficients& c,
                CUstream_st* stream);
}  // namespace cuda

}  // namespace kiln::ops
