// CUDA kernels of kiln::relu and kiln::relu_backward as registered Tensor
// functions; the kernels themselves are in relu_cuda.cu on raw pointers.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "../op_support.h"
#include "relu_kernel.h"

namespace kiln::ops {
namespace {

at::Tensor relu_cuda(const at::Tensor& x) {
  auto e = elementwise("kiln::relu", "x", x);
  const c10::cuda::CUDAGuard device_guard(x.device());
  if (e.x.numel() > 0)
    cuda::relu_forward(kernel_dtype(e.x), e.x.const_data_ptr(), e.out.data_ptr(), e.x.numel(),
                       c10::cuda::getCurrentCUDAStream());
  return e.out;
}

at::Tensor relu_backward_cuda(const at::Tensor& grad, const at::Tensor& y) {
  auto e = elementwise("kiln::relu_backward", "grad", grad, "y", y);
  const c10::cuda::CUDAGuard device_guard(grad.device());
  if (e.a.numel() > 0)
    cuda::relu_backward(kernel_dtype(e.a), e.a.const_data_ptr(), e.b.const_data_ptr(),
                        e.out.data_ptr(), e.a.numel(), c10::cuda::getCurrentCUDAStream());
  return e.out;
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("relu", relu_cuda);
  m.impl("relu_backward", relu_backward_cuda);
}

}  // namespace kiln::ops
