// CUDA kernel of kiln::fused_lion_ as a registered function: checks, guards the
// device and hands every tensor's raw pointers to the multi-tensor launcher in
// lion_cuda.cu on the current stream.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "lion_args.h"

namespace kiln::ops {
namespace {

void fused_lion_cuda(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                     double lr, double beta1, double beta2, double weight_decay) {
  auto a = fused_lion_args(params, grads, exp_avgs, beta1, beta2);
  if (a.spans.empty()) return;
  const c10::cuda::CUDAGuard device_guard(params[0].device());
  cuda::lion_update(a.dtype, a.spans.data(), static_cast<int64_t>(a.spans.size()),
                    lion_coefficients(lr, beta1, beta2, weight_decay),
                    c10::cuda::getCurrentCUDAStream());
  a.copy_back();  // on the same stream, after the update
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CUDA, m) { m.impl("fused_lion_", fused_lion_cuda); }

}  // namespace kiln::ops
