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
  check_floating("kiln::relu", "x", x);
  const c10::cuda::CUDAGuard device_guard(x.device());
  const auto xc = x.contiguous();
  auto y = at::empty_like(xc, at::MemoryFormat::Contiguous);
  if (xc.numel() > 0)
    cuda::relu_forward(kernel_dtype(xc), xc.const_data_ptr(), y.data_ptr(), xc.numel(),
                       c10::cuda::getCurrentCUDAStream());
  return y;
}

at::Tensor relu_backward_cuda(const at::Tensor& grad, const at::Tensor& y) {
  check_floating("kiln::relu_backward", "grad", grad);
  check_like("kiln::relu_backward", "grad", grad, "y", y);
  const c10::cuda::CUDAGuard device_guard(grad.device());
  const auto gc = grad.contiguous();
  const auto yc = y.contiguous();
  auto gx = at::empty_like(gc, at::MemoryFormat::Contiguous);
  if (gc.numel() > 0)
    cuda::relu_backward(kernel_dtype(gc), gc.const_data_ptr(), yc.const_data_ptr(), gx.data_ptr(),
                        gc.numel(), c10::cuda::getCurrentCUDAStream());
  return gx;
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("relu", relu_cuda);
  m.impl("relu_backward", relu_backward_cuda);
}

}  // namespace kiln::ops
