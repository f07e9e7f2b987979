// CUDA kernel of kiln::fused_adamw_ as a registered function: checks, guards the
// device and hands every tensor's raw pointers to the multi-tensor launcher in
// adamw_cuda.cu on the current stream.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "adamw_args.h"

namespace kiln::ops {
namespace {

void fused_adamw_cuda(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                      at::TensorList exp_avg_sqs, double lr, double beta1, double beta2,
                      double weight_decay, double eps, int64_t step) {
  auto a = fused_adamw_args(params, grads, exp_avgs, exp_avg_sqs, beta1, beta2, step);
  if (a.spans.empty()) return;
  const c10::cuda::CUDAGuard device_guard(params[0].device());
  cuda::adamw_update(a.dtype, a.spans.data(), static_cast<int64_t>(a.spans.size()),
                     adamw_coefficients(lr, beta1, beta2, weight_decay, eps, step),
                     c10::cuda::getCurrentCUDAStream());
  a.copy_back();  // on the same stream, after the update
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CUDA, m) { m.impl("fused_adamw_", fused_adamw_cuda); }

}  // namespace kiln::ops
