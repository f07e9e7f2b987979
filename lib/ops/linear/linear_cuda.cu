// kiln::linear on CUDA: one cublasLtMatmul with the bias (and GELU) fused into its
// epilogue, on raw pointers and a stream (the Tensor side is linear_cuda.cpp, so
// this file sees no ATen). Inputs are float32, float16 or bfloat16; compute is
// float32 (TF32 for float32 when the caller allows it, as ATen's matmul setting does).
#include <c10/util/Exception.h>
#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "linear_kernel.h"

namespace kiln::ops::cuda {
namespace {

void check(cublasStatus_t status, const char* op, const char* call) {
  TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS, op, ": ", call, " failed: ",
              cublasLtGetStatusName(status), " (", static_cast<int>(status), ")");
}

// Owners of cuBLASLt descriptors (destroyed when the call is done with them).
struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
  void operator()(cublasLtMatrixLayoutOpaque_t* d) const { cublasLtMatrixLayoutDestroy(d); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* d) const { cublasLtMatmulPreferenceDestroy(d); }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, DescDeleter>;

template <typename Desc, typename Attr, typename V>
void set(cublasStatus_t (*setter)(Desc, Attr, const void*, size_t), Desc desc, Attr attr,
         const V& value, const char* op, const char* call) {
  check(setter(desc, attr, &value, sizeof(value)), op, call);
}

// A rows × cols column-major layout with leading dimension ld.
Layout layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, const char* op) {
  cublasLtMatrixLayout_t raw = nullptr;
  check(cublasLtMatrixLayoutCreate(&raw, type, static_cast<uint64_t>(rows),
                                   static_cast<uint64_t>(cols), ld),
        op, "cublasLtMatrixLayoutCreate");
  return Layout(raw);
}

// The largest power of two, at most 16, that divides the address: cuBLASLt picks
// only kernels whose vector loads this alignment allows.
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t bytes = 16;
  while (bytes > 1 && a % bytes != 0) bytes /= 2;
  return bytes;
}

cudaDataType_t data_type(DType dtype) {
  switch (dtype) {
    case DType::kHalf: return CUDA_R_16F;
    case DType::kBFloat16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

cublasLtEpilogue_t epilogue(const LtLinear& p) {
  const bool bias = p.bias != nullptr;
  switch (p.gelu) {
    case LtGelu::kGelu: return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    case LtGelu::kGeluKeepInput:
      return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case LtGelu::kNone: break;
  }
  return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

}  // namespace

bool lt_linear(const LtLinear& p) {
  if (p.dtype == DType::kDouble) return false;
  // cuBLASLt: the GELU input matrix's leading dimension must be a multiple of 8.
  if (p.gelu == LtGelu::kGeluKeepInput && p.ldd % 8 != 0) return false;
  const char* op = p.op;
  const cudaDataType_t type = data_type(p.dtype);
  const cublasComputeType_t compute =
      p.dtype == DType::kFloat && p.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;

  cublasLtMatmulDesc_t raw_desc = nullptr;
  check(cublasLtMatmulDescCreate(&raw_desc, compute, CUDA_R_32F), op, "cublasLtMatmulDescCreate");
  const MatmulDesc desc(raw_desc);
  const auto set_desc = [&](cublasLtMatmulDescAttributes_t attr, const auto& value) {
    set(cublasLtMatmulDescSetAttribute, raw_desc, attr, value, op,
        "cublasLtMatmulDescSetAttribute");
  };
  const int32_t trans_a = p.a.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int32_t trans_b = p.b.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(CUBLASLT_MATMUL_DESC_TRANSA, trans_a);
  set_desc(CUBLASLT_MATMUL_DESC_TRANSB, trans_b);
  const uint32_t ep = epilogue(p);
  set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE, ep);
  if (p.bias) set_desc(CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  if (p.gelu == LtGelu::kGeluKeepInput) {
    set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux);
    set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.ldd);
  }

  // Stored shapes: op(a) is (m, k), so a is stored (k, m) when transposed; op(b) is (k, n).
  const auto a_desc = p.a.transpose ? layout(type, p.k, p.m, p.a.ld, op)
                                    : layout(type, p.m, p.k, p.a.ld, op);
  const auto b_desc = p.b.transpose ? layout(type, p.n, p.k, p.b.ld, op)
                                    : layout(type, p.k, p.n, p.b.ld, op);
  const auto d_desc = layout(type, p.m, p.n, p.ldd, op);

  cublasLtMatmulPreference_t raw_pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&raw_pref), op, "cublasLtMatmulPreferenceCreate");
  const Preference pref(raw_pref);
  const auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attr, const auto& value) {
    set(cublasLtMatmulPreferenceSetAttribute, raw_pref, attr, value, op,
        "cublasLtMatmulPreferenceSetAttribute");
  };
  const uint64_t workspace_size = p.workspace_size;
  set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_size);
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment(p.a.data));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment(p.b.data));
  // The epilogue reads the bias and writes the GELU input with the output's vector
  // width, and the preference has no alignment of its own for them: a bias (or aux)
  // less aligned than d must lower d's, or a kernel may load it misaligned and
  // fault, killing the CUDA context. ATen folds the bias in the same way.
  uint32_t d_align = alignment(p.d);
  if (p.bias) d_align = std::min(d_align, alignment(p.bias));
  if (p.aux) d_align = std::min(d_align, alignment(p.aux));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, d_align);
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, d_align);
  if (p.dtype != DType::kFloat) {
    // Split-K partial sums are reduced in the compute type (float) only: the
    // INPLACE and OUTPUT_TYPE schemes sum them in the output type, float16 or
    // bfloat16, and lose digits. No split-K (scheme NONE, 0) stays allowed.
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    set_pref(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, schemes);
  }

  cublasLtMatmulHeuristicResult_t heuristic = {};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      p.handle, raw_desc, a_desc.get(), b_desc.get(), d_desc.get(), d_desc.get(), raw_pref, 1,
      &heuristic, &found);
  // No algorithm, for whatever reason (not supported, an alignment or layout it
  // refuses, an invalid value): ATen's path computes it instead.
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) return false;

  const float alpha = 1.0f, beta = 0.0f;
  check(cublasLtMatmul(p.handle, raw_desc, &alpha, p.a.data, a_desc.get(), p.b.data, b_desc.get(),
                       &beta, p.d, d_desc.get(), p.d, d_desc.get(), &heuristic.algo, p.workspace,
                       p.workspace_size, p.stream),
        op, "cublasLtMatmul");
  return true;
}

}  // namespace kiln::ops::cuda
