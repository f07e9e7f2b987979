// Raw-pointer entry points of kiln's batch norm on the CPU, shared by the CPU
// capability builds and the Tensor-level code in batch_norm_cpu.cpp.
//
// x is one of two layouts, both (N, C, *) tensors seen as runs of contiguous elements:
// `rows` (channels last: (N·S) rows of C channels, element j of a row in channel j) or
// `planes` (contiguous NCHW: N·C planes of S elements, plane p all in channel p % C).
// Each call takes the runs [begin, end) (rows, or planes); per-channel sums go into the
// caller's per-thread partials, which it adds up over threads in a fixed order.
#pragma once
#include <cstdint>

#include "../cpu_capability.h"
#include "../kernel_types.h"

namespace kiln::ops::cpu {

struct BatchNormLayout {
  bool rows = false;   // channels last: runs of c elements; else planes of s elements
  int64_t c = 0;       // channels
  int64_t s = 0;       // elements per plane (planes layout; H·W…)
  int64_t run() const { return rows ? c : s; }
  /// The runs of a tensor of `numel` elements in this layout.
  int64_t runs(int64_t numel) const { return run() == 0 ? 0 : numel / run(); }
};

// Σ (x − shift[c]) and Σ (x − shift[c])² per channel over the runs [begin, end), added
// into sum and sum_sq (c doubles each; float32 partial sums flushed every few hundred
// values). shift: each channel's first value (shifted sums: no cancellation when the
// mean is far from zero).
KILN_DECLARE_CPU_KERNEL(batch_norm_stats,
                        (DType x_dtype, const BatchNormLayout& layout, const void* x, const float* shift,
                         double* sum, double* sum_sq, int64_t begin, int64_t end))
// y = x·scale[c] + shift[c], then max(0, ·) where relu, in x's dtype, for the runs [begin, end).
KILN_DECLARE_CPU_KERNEL(batch_norm_apply,
                        (DType x_dtype, const BatchNormLayout& layout, const void* x, const float* scale,
                         const float* shift, bool relu, void* y, int64_t begin, int64_t end))
// With dz = grad, or grad where x·scale[c] + shift[c] > 0 and 0 elsewhere (relu: the
// forward's mask, recomputed): Σ dz and Σ dz·(x − mean[c]) per channel added into
// sum_dz and sum_dzx (c doubles each), for the runs [begin, end).
KILN_DECLARE_CPU_KERNEL(batch_norm_grad_sums,
                        (DType x_dtype, const BatchNormLayout& layout, const void* grad, const void* x,
                         const float* scale, const float* shift, const float* mean, bool relu, double* sum_dz,
                         double* sum_dzx, int64_t begin, int64_t end))
// dx = a[c]·dz + (x − mean[c])·k1[c] + k0[c] (dz as above) in x's dtype, for the runs
// [begin, end): x − mean first, as ATen's backward takes it, so that a mean far from zero
// cancels exactly rather than in the rounding of x·k1 against mean·k1.
KILN_DECLARE_CPU_KERNEL(batch_norm_grad_input,
                        (DType x_dtype, const BatchNormLayout& layout, const void* grad, const void* x,
                         const float* scale, const float* shift, bool relu, const float* mean, const float* a,
                         const float* k1, const float* k0, void* dx, int64_t begin, int64_t end))

}  // namespace kiln::ops::cpu
