// CUDA kernel of kiln::dropout as a registered Tensor function; the kernel itself
// is in dropout_cuda.cu on raw pointers. The mask is the CPU's, element for element.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "../op_support.h"
#include "dropout_args.h"
#include "dropout_kernel.h"

namespace kiln::ops {
namespace {

at::Tensor dropout_cuda(const at::Tensor& x, double p, int64_t seed) {
  const auto [k, xc] = dropout_call(x, p);
  if (p == 0.0) return xc.clone();
  auto out = at::empty_like(xc);
  const c10::cuda::CUDAGuard device_guard(x.device());
  if (xc.numel() > 0)
    cuda::dropout(kernel_dtype(xc), xc.const_data_ptr(), out.data_ptr(), xc.numel(),
                  static_cast<uint64_t>(seed), k.keep_below, k.scale, c10::cuda::getCurrentCUDAStream());
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CUDA, m) { m.impl("dropout", dropout_cuda); }

}  // namespace kiln::ops
