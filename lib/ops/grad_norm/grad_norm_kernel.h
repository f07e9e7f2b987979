// Raw-pointer entry points of the grad_norm kernels, shared by the CPU capability
// builds, the CUDA launcher and the Tensor-level code in grad_norm_cpu.cpp/grad_norm_cuda.cpp.
#pragma once
#include <cstdint>

#include "../cpu_capability.h"
#include "../kernel_types.h"

struct CUstream_st;

namespace kiln::ops {
namespace cpu {
// Σ x[i]² over n elements of `dtype`, accumulated in float lanes (double for
// kDouble) and summed across lanes in double.
KILN_DECLARE_CPU_KERNEL(grad_norm_sumsq, (DType dtype, const void* x, int64_t n, double* out))
}  // namespace cpu

namespace cuda {
/// Elements per chunk of the multi-tensor table (each chunk lies in one tensor).
constexpr int64_t kGradNormChunk = 65536;
// One launch: table[2c] is chunk c's address, table[2c+1] its length (≤ kGradNormChunk);
// every block sums its chunks' squares into partials[block] (double); the last
// block to finish writes √Σ partials to out[0] (float, or double when out_double).
// workspace: `blocks` doubles then one unsigned counter (zeroed here, on `stream`).
void grad_norm(DType dtype, const int64_t* table, int64_t chunks, void* workspace, int blocks,
               void* out, bool out_double, CUstream_st* stream);
/// The block count grad_norm uses for `chunks` chunks (size the workspace by it).
int grad_norm_blocks(int64_t chunks);
}  // namespace cuda
}  // namespace kiln::ops
