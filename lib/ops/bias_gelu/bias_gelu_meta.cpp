// Meta kernels of kiln::bias_gelu and kiln::bias_gelu_backward: the checks the CPU
// and CUDA kernels share (bias_gelu_args.h) and their outputs' allocation without
// the arithmetic, so shapes, strides and dtypes are known without data.
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include "bias_gelu_args.h"

namespace kiln::ops {
namespace {

// y: like x, contiguous.
at::Tensor bias_gelu_meta(const at::Tensor& x, const at::Tensor& b) {
  return output_like(bias_gelu_args("kiln::bias_gelu", x, b).x);
}

// dx: like x, contiguous; db: (N) in b's dtype, contiguous (the CPU kernel's
// reduced partial sums cast back to b's dtype, CUDA's zeros_like(b)).
std::tuple<at::Tensor, at::Tensor> bias_gelu_backward_meta(const at::Tensor& grad,
                                                           const at::Tensor& x,
                                                           const at::Tensor& b) {
  auto args = bias_gelu_backward_args(grad, x, b);
  return {std::move(args.dx), at::empty_like(args.in.b, at::MemoryFormat::Contiguous)};
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("bias_gelu", bias_gelu_meta);
  m.impl("bias_gelu_backward", bias_gelu_backward_meta);
}

}  // namespace kiln::ops
