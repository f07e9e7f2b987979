// CUDA kernels of kiln::linear, linear_gelu, linear_relu, linear_gelu_forward and
// linear_backward as registered Tensor functions: checks, the operands as cuBLAS
// sees them, ATen's cuBLASLt handle and workspace for the current stream, then one
// cublasLtMatmul (linear_cuda.cu). float64, empty shapes and what cuBLASLt cannot
// fuse go through ATen (linear_aten.cpp); backward is two at::mm and a sum.
#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/relu.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>

#include "../op_support.h"
#include "linear_aten.h"
#include "linear_kernel.h"

namespace kiln::ops {
namespace {

using OptTensor = std::optional<at::Tensor>;
using cuda::LtGelu;

// t: (rows, cols) as a column-major cuBLAS operand, without a copy when its strides
// allow: row-major storage is the column-major transpose with ld = stride(0),
// column-major storage (a transposed view) is itself with ld = stride(1). Strides
// of size-1 dimensions do not matter; anything else is copied contiguous.
struct Operand {
  at::Tensor t;
  bool row_major;
  int64_t ld;
};

Operand operand(const at::Tensor& t) {
  const int64_t rows = t.size(0), cols = t.size(1);
  if ((cols <= 1 || t.stride(1) == 1) && (rows <= 1 || t.stride(0) >= cols))
    return {t, true, rows <= 1 ? std::max<int64_t>(cols, 1) : t.stride(0)};
  if ((rows <= 1 || t.stride(0) == 1) && (cols <= 1 || t.stride(1) >= rows))
    return {t, false, cols <= 1 ? std::max<int64_t>(rows, 1) : t.stride(1)};
  return {t.contiguous(), true, std::max<int64_t>(cols, 1)};
}

struct LtResult {
  at::Tensor y, z;  // z only for LtGelu::kGeluKeepInput
};

// y: (B, N) row-major is the column-major (N, B) matrix w·xᵀ: cuBLAS's m = N,
// n = B, a = w (transposed when row-major), b = x (transposed when column-major).
// Returns nothing when cuBLASLt cannot run it, so the caller falls back to ATen.
std::optional<LtResult> lt_forward(const char* op, const at::Tensor& x, const at::Tensor& w,
                                   const OptTensor& b, LtGelu gelu) {
  if (x.scalar_type() == at::kDouble || x.numel() == 0 || w.numel() == 0) return std::nullopt;
  const auto xo = operand(x), wo = operand(w);
  const auto bias = b && b->defined() ? b->contiguous() : at::Tensor();
  LtResult r;
  r.y = at::empty({x.size(0), w.size(0)}, x.options());
  if (gelu == LtGelu::kGeluKeepInput) r.z = at::empty_like(r.y);

  cuda::LtLinear p;
  p.op = op;
  p.dtype = kernel_dtype(x);
  p.allow_tf32 = at::globalContext().float32Precision(at::Float32Backend::CUDA,
                                                      at::Float32Op::MATMUL) ==
                 at::Float32Precision::TF32;
  p.m = w.size(0);
  p.n = x.size(0);
  p.k = x.size(1);
  p.a = {wo.t.const_data_ptr(), wo.row_major, wo.ld};
  p.b = {xo.t.const_data_ptr(), !xo.row_major, xo.ld};
  p.bias = bias.defined() ? bias.const_data_ptr() : nullptr;
  p.d = r.y.data_ptr();
  p.ldd = p.m;
  p.gelu = gelu;
  p.aux = r.z.defined() ? r.z.data_ptr() : nullptr;
  p.handle = at::cuda::getCurrentCUDABlasLtHandle();
  p.workspace = at::cuda::getCUDABlasLtWorkspace();
  p.workspace_size = at::cuda::getCUDABlasLtWorkspaceSize();
  p.stream = at::cuda::getCurrentCUDAStream();
  if (!cuda::lt_linear(p)) return std::nullopt;
  return r;
}

at::Tensor linear_cuda(const at::Tensor& x, const at::Tensor& w, const OptTensor& b) {
  linear::check_forward("kiln::linear", x, w, b);
  const c10::cuda::CUDAGuard device_guard(x.device());
  if (auto r = lt_forward("kiln::linear", x, w, b, LtGelu::kNone)) return r->y;
  return linear::forward_aten(x, w, b);
}

at::Tensor linear_gelu_cuda(const at::Tensor& x, const at::Tensor& w, const OptTensor& b) {
  linear::check_forward("kiln::linear_gelu", x, w, b);
  const c10::cuda::CUDAGuard device_guard(x.device());
  if (auto r = lt_forward("kiln::linear_gelu", x, w, b, LtGelu::kGelu)) return r->y;
  return linear::gelu_aten(x, w, b);
}

at::Tensor linear_relu_cuda(const at::Tensor& x, const at::Tensor& w, const OptTensor& b) {
  linear::check_forward("kiln::linear_relu", x, w, b);
  const c10::cuda::CUDAGuard device_guard(x.device());
  // The product with its bias from cuBLASLt, then the ReLU in place (at::relu_: kiln's
  // map kernel takes its output __restrict__), not cuBLASLt's RELU_BIAS epilogue:
  // oneDNN's fused ReLU turns NaN into 0 (a max against zero) and cuBLASLt does not
  // document what its epilogue does with NaN; kiln::relu keeps it, so a diverging
  // layer stays visible.
  auto r = lt_forward("kiln::linear_relu", x, w, b, LtGelu::kNone);
  if (!r) return linear::relu_aten(x, w, b);
  at::relu_(r->y);
  return r->y;
}

std::tuple<at::Tensor, at::Tensor> linear_gelu_forward_cuda(const at::Tensor& x,
                                                            const at::Tensor& w,
                                                            const OptTensor& b) {
  linear::check_forward("kiln::linear_gelu_forward", x, w, b);
  const c10::cuda::CUDAGuard device_guard(x.device());
  if (auto r = lt_forward("kiln::linear_gelu_forward", x, w, b, LtGelu::kGeluKeepInput))
    return {r->y, r->z};
  return linear::gelu_forward_aten(x, w, b);
}

// at::mm (cuBLAS) twice and a sum: a DGELU/BGRAD epilogue would only fuse db.
std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_backward_cuda(const at::Tensor& grad,
                                                                    const at::Tensor& x,
                                                                    const at::Tensor& w,
                                                                    std::array<bool, 3> output_mask) {
  linear::check_backward("kiln::linear_backward", grad, x, w);
  const c10::cuda::CUDAGuard device_guard(x.device());
  return linear::backward_aten(grad, x, w, output_mask);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("linear", linear_cuda);
  m.impl("linear_gelu", linear_gelu_cuda);
  m.impl("linear_relu", linear_relu_cuda);
  m.impl("linear_gelu_forward", linear_gelu_forward_cuda);
  m.impl("linear_backward", linear_backward_cuda);
}

}  // namespace kiln::ops
