// CUDA kernels of kiln::gelu and kiln::gelu_backward as registered Tensor
// functions; the kernels themselves are in gelu_cuda.cu on raw pointers.
#include <torch/library.h>

#include "../cuda_op_support.h"
#include "gelu_kernel.h"

namespace kiln::ops {
namespace {

at::Tensor gelu_cuda(const at::Tensor& x) { return cuda_unary("kiln::gelu", "x", x, cuda::gelu_forward); }

at::Tensor gelu_backward_cuda(const at::Tensor& grad, const at::Tensor& x) {
  return cuda_binary("kiln::gelu_backward", "grad", grad, "x", x, cuda::gelu_backward, LayoutFrom::kSecond);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("gelu", gelu_cuda);
  m.impl("gelu_backward", gelu_backward_cuda);
}

}  // namespace kiln::ops
