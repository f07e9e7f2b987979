// Raw-pointer entry points of the dropout kernels, shared by the CPU capability
// builds, the CUDA launcher and the Tensor-level code in dropout_cpu.cpp/dropout_cuda.cpp.
#pragma once
#include <cstdint>

#include "../cpu_capability.h"
#include "../kernel_types.h"

struct CUstream_st;

namespace kiln::ops {
namespace cpu {
// y[i] = x[i]·scale where Philox word i (philox.h's layout, elements counted from
// `first`) is below keep_below, else x[i]·0; x and y hold elements first…first+n−1.
KILN_DECLARE_CPU_KERNEL(dropout, (DType dtype, const void* x, void* y, int64_t first, int64_t n,
                                  uint64_t seed, uint32_t keep_below, double scale, Stores stores))
}  // namespace cpu

namespace cuda {
void dropout(DType dtype, const void* x, void* y, int64_t n, uint64_t seed, uint32_t keep_below,
             double scale, CUstream_st* stream);
}  // namespace cuda
}  // namespace kiln::ops
