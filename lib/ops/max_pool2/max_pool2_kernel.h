// Raw-pointer entry points of kiln's 2×2 max-pool on the CPU, shared by the CPU
// capability builds and the Tensor-level code in max_pool2_cpu.cpp.
#pragma once
#include <cstdint>

#include "../cpu_capability.h"
#include "../kernel_types.h"

namespace kiln::ops::cpu {

/// x (n, c, h, w) in channels-last (NHWC) or contiguous (NCHW) memory; the output
/// (n, c, h/2, w/2) and its codes in the same layout.
struct PoolShape {
  int64_t n = 0, c = 0, h = 0, w = 0;
  bool channels_last = false;
  int64_t oh() const { return h / 2; }
  int64_t ow() const { return w / 2; }
  /// The units the kernels split over threads: output rows (n, oh) in channels last,
  /// planes (n, c) in NCHW.
  int64_t units() const { return channels_last ? n * oh() : n * c; }
};

// y = the largest of each 2×2 window (a NaN wins, the last one seen; ties go to the
// first in row-major order, as ATen's max_pool2d), code = its position 0..3 (row·2 +
// column) as a byte, for the units [begin, end).
KILN_DECLARE_CPU_KERNEL(max_pool2_forward,
                        (DType dtype, const PoolShape& shape, const void* x, void* y, uint8_t* code,
                         int64_t begin, int64_t end))
// dx: grad at each window's coded position, zeros elsewhere (the rows and columns past
// the last whole window included), for the units [begin, end).
KILN_DECLARE_CPU_KERNEL(max_pool2_backward,
                        (DType dtype, const PoolShape& shape, const void* grad, const uint8_t* code, void* dx,
                         int64_t begin, int64_t end))

}  // namespace kiln::ops::cpu
