// CUDA kernels of kiln::sigmoid and kiln::sigmoid_backward as registered Tensor
// functions; the kernels themselves are in sigmoid_cuda.cu on raw pointers.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "../op_support.h"
#include "sigmoid_args.h"
#include "sigmoid_kernel.h"

namespace kiln::ops {
namespace {

at::Tensor sigmoid_cuda(const at::Tensor& x, double beta, std::optional<double> grad_clip) {
  sigmoid_clip("kiln::sigmoid", grad_clip);
  auto e = elementwise("kiln::sigmoid", "x", x);
  const c10::cuda::CUDAGuard device_guard(x.device());
  if (e.x.numel() > 0)
    cuda::sigmoid_forward(kernel_dtype(e.x), e.x.const_data_ptr(), e.out.data_ptr(), e.x.numel(),
                          beta, c10::cuda::getCurrentCUDAStream());
  return e.out;
}

at::Tensor sigmoid_backward_cuda(const at::Tensor& grad, const at::Tensor& s, double beta,
                                 std::optional<double> grad_clip) {
  const double clip = sigmoid_clip("kiln::sigmoid_backward", grad_clip);
  auto e = elementwise("kiln::sigmoid_backward", "grad", grad, "s", s, LayoutFrom::kSecond);
  const c10::cuda::CUDAGuard device_guard(grad.device());
  if (e.a.numel() > 0)
    cuda::sigmoid_backward(kernel_dtype(e.a), e.a.const_data_ptr(), e.b.const_data_ptr(),
                           e.out.data_ptr(), e.a.numel(), beta, clip,
                           c10::cuda::getCurrentCUDAStream());
  return e.out;
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("sigmoid", sigmoid_cuda);
  m.impl("sigmoid_backward", sigmoid_backward_cuda);
}

}  // namespace kiln::ops
