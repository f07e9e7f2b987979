// CUDA kernels of kiln::scaled_add and kiln::scaled_add_backward as registered
// Tensor functions; the kernels themselves are in scaled_add_cuda.cu on raw pointers.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "../op_support.h"
#include "scaled_add_kernel.h"

namespace kiln::ops {
namespace {

at::Tensor scaled_add_cuda(const at::Tensor& x, const at::Tensor& y, double alpha) {
  auto e = elementwise("kiln::scaled_add", "x", x, "y", y);
  const c10::cuda::CUDAGuard device_guard(x.device());
  if (e.a.numel() > 0)
    cuda::scaled_add_forward(kernel_dtype(e.a), e.a.const_data_ptr(), e.b.const_data_ptr(),
                             e.out.data_ptr(), e.a.numel(), alpha,
                             c10::cuda::getCurrentCUDAStream());
  return e.out;
}

// (alpha·grad, grad): the second gradient is grad itself, as in ATen's add backward.
std::tuple<at::Tensor, at::Tensor> scaled_add_backward_cuda(const at::Tensor& grad, double alpha) {
  auto e = elementwise("kiln::scaled_add_backward", "grad", grad);
  const c10::cuda::CUDAGuard device_guard(grad.device());
  if (e.x.numel() > 0)
    cuda::scaled_add_scale(kernel_dtype(e.x), e.x.const_data_ptr(), e.out.data_ptr(), e.x.numel(),
                           alpha, c10::cuda::getCurrentCUDAStream());
  return {e.out, grad};
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("scaled_add", scaled_add_cuda);
  m.impl("scaled_add_backward", scaled_add_backward_cuda);
}

}  // namespace kiln::ops
