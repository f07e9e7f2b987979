// CUDA kernel of kiln::fused_sgd_ as a registered function: checks, guards the device
// and hands every tensor's raw pointers to the multi-tensor launcher in sgd_cuda.cu on
// the current stream.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "sgd_args.h"

namespace kiln::ops {
namespace {

void fused_sgd_cuda(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers,
                    double lr, double momentum, double dampening, double weight_decay,
                    bool nesterov, bool first_step) {
  auto a = fused_sgd_args(params, grads, momentum_buffers, momentum);
  if (a.spans.empty()) return;
  const c10::cuda::CUDAGuard device_guard(params[0].device());
  cuda::sgd_update(a.dtype, a.spans.data(), static_cast<int64_t>(a.spans.size()),
                   {lr, momentum, dampening, weight_decay, nesterov, first_step},
                   c10::cuda::getCurrentCUDAStream());
  a.copy_back();  // on the same stream, after the update
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CUDA, m) { m.impl("fused_sgd_", fused_sgd_cuda); }

}  // namespace kiln::ops
