// The raw-pointer entry points of kiln::linear: on CUDA one cublasLtMatmul with the
// bias (and GELU) fused as its epilogue, shared by linear_cuda.cu (which sees
// cuBLASLt) and linear_cuda.cpp (which sees Tensors); on the CPU the bias (and relu or
// GELU) pass after the library's product (linear_cpu_kernel.cpp, linear_aten.cpp).
// Free of torch and cuBLAS headers.
#pragma once
#include <cstdint>
#include <cstddef>

#include "../cpu_capability.h"
#include "../kernel_types.h"

struct CUstream_st;
struct cublasLtContext;

namespace kiln::ops::cpu {
/// What the CPU's float32 product computed without its bias does next, row by row.
enum class BiasEpilogue : int8_t { kBias, kBiasRelu, kBiasGelu };
// Over rows [r0, r1) of z (rows of n floats, contiguous): z[r, j] += b[j]; then
// kBiasRelu: z = max(z, 0) in place (kiln::relu's vector max: NaN and -0 kept);
// kBiasGelu: y[r, j] = gelu_tanh(z[r, j]) with z kept (y laid out like z; y == z
// writes the gelu alone), y's aligned rows streamed past the caches when `stores`
// says so.
KILN_DECLARE_CPU_KERNEL(bias_epilogue, (BiasEpilogue e, const float* b, float* z, float* y, int64_t r0,
                                        int64_t r1, int64_t n, Stores stores))
}  // namespace kiln::ops::cpu

namespace kiln::ops::cuda {

/// A matrix operand as cuBLAS sees it: column-major with leading dimension `ld`,
/// transposed by the multiply when `transpose`.
struct LtOperand {
  const void* data = nullptr;
  bool transpose = false;
  int64_t ld = 0;
};

/// Which GELU the epilogue applies after the bias.
enum class LtGelu : int8_t { kNone, kGelu, kGeluKeepInput };

/// d (m, n), column-major, ld = ldd: d = op(a)·op(b) + bias, then the GELU when asked.
/// For y = x·wᵀ + b with y: (B, N) row-major, m = N, n = B, a = w and b = x.
struct LtLinear {
  const char* op = "";  // the kiln op, for error messages
  DType dtype = DType::kFloat;
  bool allow_tf32 = false;  // float32 only: CUBLAS_COMPUTE_32F_FAST_TF32
  int64_t m = 0, n = 0, k = 0;
  LtOperand a, b;       // op(a): (m, k), op(b): (k, n)
  const void* bias = nullptr;  // (m), packed, or none
  void* d = nullptr;
  int64_t ldd = 0;
  LtGelu gelu = LtGelu::kNone;
  void* aux = nullptr;  // kGeluKeepInput: the GELU input, laid out like d
  cublasLtContext* handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_size = 0;
  CUstream_st* stream = nullptr;
};

/// Enqueues p as one cublasLtMatmul on p.stream and returns true; returns false,
/// enqueuing nothing, when cuBLASLt cannot do it (float64, an aux ld that is not a
/// multiple of 8, any heuristic status but success or no algorithm for these shapes
/// and alignments — the bias's and aux's included): the caller falls back. A
/// failure to build the descriptors or of the matmul itself throws, naming the call.
bool lt_linear(const LtLinear& p);

}  // namespace kiln::ops::cuda
