// CUDA kernels of kiln::relu and kiln::relu_backward as registered Tensor
// functions; the kernels themselves are in relu_cuda.cu on raw pointers.
#include <torch/library.h>

#include "../cuda_op_support.h"
#include "relu_kernel.h"

namespace kiln::ops {
namespace {

at::Tensor relu_cuda(const at::Tensor& x) { return cuda_unary("kiln::relu", "x", x, cuda::relu_forward); }

at::Tensor relu_backward_cuda(const at::Tensor& grad, const at::Tensor& y) {
  return cuda_binary("kiln::relu_backward", "grad", grad, "y", y, cuda::relu_backward, LayoutFrom::kSecond);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("relu", relu_cuda);
  m.impl("relu_backward", relu_backward_cuda);
}

}  // namespace kiln::ops
