// CUDA kernels of kiln::gelu and kiln::gelu_backward as registered Tensor functions.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "../op_support.h"
#include "gelu_kernel.h"

namespace kiln::ops {
namespace {

at::Tensor gelu_cuda(const at::Tensor& x) {
  auto e = elementwise("kiln::gelu", "x", x);
  const c10::cuda::CUDAGuard device_guard(x.device());
  if (e.x.numel() > 0)
    cuda::gelu_forward(kernel_dtype(e.x), e.x.const_data_ptr(), e.out.data_ptr(), e.x.numel(),
                       c10::cuda::getCurrentCUDAStream());
  return e.out;
}

at::Tensor gelu_backward_cuda(const at::Tensor& grad, const at::Tensor& x) {
  auto e = elementwise("kiln::gelu_backward", "grad", grad, "x", x);
  const c10::cuda::CUDAGuard device_guard(grad.device());
  if (e.a.numel() > 0)
    cuda::gelu_backward(kernel_dtype(e.a), e.a.const_data_ptr(), e.b.const_data_ptr(),
                        e.out.data_ptr(), e.a.numel(), c10::cuda::getCurrentCUDAStream());
  return e.out;
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("gelu", gelu_cuda);
  m.impl("gelu_backward", gelu_backward_cuda);
}

}  // namespace kiln::ops
