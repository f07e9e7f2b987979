// Raw-pointer entry points of the bias_gelu kernels. x, y, grad, dx: (rows, n)
// contiguous; b: (n).
#pragma once
#include <cstdint>

#include "../cpu_capability.h"
#include "../kernel_types.h"

struct CUstream_st;

namespace kiln::ops {
namespace cpu {
// y[r, j] = gelu(x[r, j] + b[j])
KILN_DECLARE_CPU_KERNEL(bias_gelu_forward,
                        (DType dtype, const void* x, const void* b, void* y, int64_t rows, int64_t n))
// dx[r, j] = grad[r, j]·gelu'(x[r, j] + b[j]); db_acc[j] += Σ_r dx[r, j], where db_acc
// is in the opmath type (float, or double for float64).
KILN_DECLARE_CPU_KERNEL(bias_gelu_backward,
                        (DType dtype, const void* grad, const void* x, const void* b, void* dx,
                         void* db_acc, int64_t rows, int64_t n))
}  // namespace cpu

namespace cuda {
void bias_gelu_forward(DType dtype, const void* x, const void* b, void* y, int64_t rows, int64_t n,
                       CUstream_st* stream);
/// How many row blocks bias_gelu_backward splits the rows into: the caller
/// allocates `partial` as (row_blocks, n) in the opmath type.
int64_t bias_gelu_backward_row_blocks(DType dtype, int64_t rows, int64_t n);
// dx as on the CPU; partial[k, j] = the sums of row block k; db = Σ_k partial[k, j]
// (deterministic: no atomics).
void bias_gelu_backward(DType dtype, const void* grad, const void* x, const void* b, void* dx,
                        void* partial, void* db, int64_t rows, int64_t n, CUstream_st* stream);
}  // namespace cuda
}  // namespace kiln::ops
