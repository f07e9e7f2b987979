// CUDA kernels of kiln::bias_gelu and kiln::bias_gelu_backward as registered
// Tensor functions; the kernels are in bias_gelu_cuda.cu on raw pointers.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "bias_gelu_args.h"
#include "bias_gelu_kernel.h"

namespace kiln::ops {
namespace {

at::Tensor bias_gelu_cuda(const at::Tensor& x, const at::Tensor& b) {
  const auto a = bias_gelu_args("kiln::bias_gelu", x, b);
  const c10::cuda::CUDAGuard device_guard(x.device());
  auto y = at::empty_like(a.x, at::MemoryFormat::Contiguous);
  if (a.x.numel() > 0)
    cuda::bias_gelu_forward(kernel_dtype(a.x), a.x.const_data_ptr(), a.b.const_data_ptr(),
                            y.data_ptr(), a.rows, a.n, c10::cuda::getCurrentCUDAStream());
  return y;
}

std::tuple<at::Tensor, at::Tensor> bias_gelu_backward_cuda(const at::Tensor& grad,
                                                           const at::Tensor& x,
                                                           const at::Tensor& b) {
  auto args = bias_gelu_backward_args(grad, x, b);
  const auto& a = args.in;
  const auto& g = args.grad;
  auto& dx = args.dx;
  const c10::cuda::CUDAGuard device_guard(x.device());
  if (a.x.numel() == 0) return {dx, at::zeros_like(a.b)};
  auto db = at::empty_like(a.b);  // the kernels write every element
  auto partial = at::empty({cuda::bias_gelu_backward_row_blocks(kernel_dtype(a.x), a.rows, a.n), a.n},
                           x.options().dtype(args.acc_type));
  cuda::bias_gelu_backward(kernel_dtype(a.x), g.const_data_ptr(), a.x.const_data_ptr(),
                           a.b.const_data_ptr(), dx.data_ptr(), partial.data_ptr(), db.data_ptr(),
                           a.rows, a.n, c10::cuda::getCurrentCUDAStream());
  return {dx, db};
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("bias_gelu", bias_gelu_cuda);
  m.impl("bias_gelu_backward", bias_gelu_backward_cuda);
}

}  // namespace kiln::ops
