// CUDA kernels of kiln::cross_entropy_forward and kiln::cross_entropy_backward as
// registered Tensor functions; the kernels themselves are in cross_entropy_cuda.cu.
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "../op_support.h"
#include "cross_entropy_args.h"
#include "cross_entropy_kernel.h"

namespace kiln::ops {
namespace {

std::tuple<at::Tensor, at::Tensor> cross_entropy_forward_cuda(const at::Tensor& logits,
                                                              const at::Tensor& target) {
  // The checks first: CPU logits beside a CUDA target reach this kernel, and a
  // guard built on the CPU device would throw c10's error instead of kiln's. The
  // class indices' range is checked by the kernels, on the device.
  const auto a = cross_entropy_metadata_args("kiln::cross_entropy_forward", logits, target);
  const c10::cuda::CUDAGuard device_guard(logits.device());
  const auto acc = logits.options().dtype(cross_entropy_acc_dtype(logits));
  auto lse = at::empty({a.rows}, acc), nll = at::empty({a.rows}, acc);
  auto loss = at::empty({}, logits.options());
  cuda::cross_entropy_forward(kernel_dtype(a.logits), a.logits.const_data_ptr(),
                              a.target.const_data_ptr<int64_t>(), lse.data_ptr(), nll.data_ptr(),
                              loss.data_ptr(), a.rows, a.classes,
                              c10::cuda::getCurrentCUDAStream());
  return {loss, lse};
}

at::Tensor cross_entropy_backward_cuda(const at::Tensor& grad, const at::Tensor& logits,
                                       const at::Tensor& target, const at::Tensor& lse) {
  const char* op = "kiln::cross_entropy_backward";
  const auto a = cross_entropy_metadata_args(op, logits, target);
  check_cross_entropy_backward(op, grad, lse, a);
  const c10::cuda::CUDAGuard device_guard(logits.device());
  auto out = at::empty_like(a.logits, at::MemoryFormat::Contiguous);
  if (a.rows == 0) return out;
  const auto gc = grad.contiguous(), lc = lse.contiguous();
  cuda::cross_entropy_backward(kernel_dtype(a.logits), gc.const_data_ptr(),
                               a.logits.const_data_ptr(), a.target.const_data_ptr<int64_t>(),
                               lc.const_data_ptr(), out.data_ptr(), a.rows, a.classes,
                               c10::cuda::getCurrentCUDAStream());
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("cross_entropy_forward", cross_entropy_forward_cuda);
  m.impl("cross_entropy_backward", cross_entropy_backward_cuda);
}

}  // namespace kiln::ops
