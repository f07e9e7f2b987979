// CUDA kernels of kiln::scaled_add and kiln::scaled_add_backward as registered
// Tensor functions; the kernels themselves are in scaled_add_cuda.cu on raw pointers.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "../op_support.h"
#include "scaled_add_args.h"
#include "scaled_add_kernel.h"

namespace kiln::ops {
namespace {

at::Tensor scaled_add_cuda(const at::Tensor& x, const at::Tensor& y, double alpha) {
  if (is_mixed_pair(x, y)) {  // float32 with a half type: one pass, the half side widened
    // as it is read (a cast first and kiln's add after were two passes, 0.41-0.62x
    // ATen's add at 2^16-2^26 on the H200; ATen's add itself, called from here, was
    // 1.00x at 2^24-2^26 but 0.77-0.79x at 2^16-2^20, its TensorIterator set-up on top
    // of kiln's checks, 2026-12-04).
    auto m = mixed_pair("kiln::scaled_add", x, y);
    const bool x_low = m.x.scalar_type() != at::kFloat;
    const c10::cuda::CUDAGuard device_guard(x.device());
    if (m.out.numel() > 0)
      cuda::scaled_add_forward_mixed(kernel_dtype(x_low ? m.x : m.y), x_low, m.x.const_data_ptr(),
                                     m.y.const_data_ptr(), m.out.data_ptr<float>(), m.out.numel(),
                                     alpha, c10::cuda::getCurrentCUDAStream());
    return m.out;
  }
  auto e = elementwise("kiln::scaled_add", "x", x, "y", y);
  const c10::cuda::CUDAGuard device_guard(x.device());
  if (e.a.numel() > 0)
    cuda::scaled_add_forward(kernel_dtype(e.a), e.a.const_data_ptr(), e.b.const_data_ptr(),
                             e.out.data_ptr(), e.a.numel(), alpha,
                             c10::cuda::getCurrentCUDAStream());
  return e.out;
}

// (alpha·grad, grad): the second gradient is grad itself, as in ATen's add backward;
// the first in x_dtype (a half type for a mixed forward's float32 grad).
std::tuple<at::Tensor, at::Tensor> scaled_add_backward_cuda(const at::Tensor& grad, double alpha,
                                                            std::optional<at::ScalarType> x_dtype) {
  const auto gx_dtype = x_grad_dtype("kiln::scaled_add_backward", grad, x_dtype);
  const c10::cuda::CUDAGuard device_guard(grad.device());
  if (gx_dtype != grad.scalar_type()) {  // float32 grad, a half type's gradient: one pass
    // (the scale and a cast after it were 0.97-0.98x ATen's mul and cast on the H200).
    const auto g = dense(grad);
    auto gx = output_like(g, gx_dtype);
    if (g.numel() > 0)
      cuda::scaled_add_scale_to(kernel_dtype(gx), g.const_data_ptr<float>(), gx.data_ptr(), g.numel(),
                                alpha, c10::cuda::getCurrentCUDAStream());
    return {gx, grad};
  }
  auto e = elementwise("kiln::scaled_add_backward", "grad", grad);
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
