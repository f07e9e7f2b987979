// Raw-pointer entry points of the fused AdamW update, shared by the CPU capability
// builds, the CUDA multi-tensor launcher and the Tensor-level code (adamw_cpu.cpp,
// adamw_cuda.cpp); free of torch headers so the .cu compiles fast.
#pragma once
#include <cmath>
#include <cstdint>

#include "../cpu_capability.h"
#include "../kernel_types.h"
#include "../multi_tensor.h"

struct CUstream_st;

namespace kiln::ops {

/// The per-step constants of an AdamW update, computed once in double:
///   p ← p·decay
///   m ← β1·m + (1−β1)·g ;  v ← β2·v + (1−β2)·g²
///   p ← p − step_size · m / (√v · inv_sqrt_bias_correction2 + eps)
/// with decay = 1 − lr·λ, step_size = lr/(1−β1ᵗ), inv_sqrt_bias_correction2 = 1/√(1−β2ᵗ):
/// the arithmetic of torch::optim::AdamW, with its √(1−β2ᵗ) division as a product.
struct AdamWCoefficients {
  double decay, beta1, beta2, step_size, inv_sqrt_bias_correction2, eps;
};

/// Example: auto c = adamw_coefficients(1e-3, 0.9, 0.999, 0.01, 1e-8, /*step=*/1);
inline AdamWCoefficients adamw_coefficients(double lr, double beta1, double beta2,
                                            double weight_decay, double eps, int64_t step) {
  const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(step));
  return {1 - lr * weight_decay, beta1, beta2, lr / bias_correction1,
          1 / std::sqrt(bias_correction2), eps};
}

namespace cpu {
// Updates one span (param, grad, exp_avg, exp_avg_sq) in place, any length and
// alignment; half types compute in float; `reads` as cpu_memory.h's prefetch_reads
// chose for the whole step.
KILN_DECLARE_CPU_KERNEL(adamw_update,
                        (DType dtype, const TensorSpan& span, const AdamWCoefficients& c, Reads reads))
}  // namespace cpu

namespace cuda {
/// Updates every span on `stream`: one kernel launch per 64 spans.
void adamw_update(DType dtype, const TensorSpan* spans, int64_t count, const AdamWCoefficients& c,
                  CUstream_st* stream);
}  // namespace cuda

}  // namespace kiln::ops
