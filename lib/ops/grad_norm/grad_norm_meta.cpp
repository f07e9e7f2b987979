// Meta kernel of kiln::grad_norm: the checks the CPU and CUDA kernels share
// (grad_norm_args.h) and the result's allocation without the sum, so its dtype
// and shape are known without data.
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "grad_norm_args.h"

namespace kiln::ops {
namespace {

// A 0-dim float32 (float64 for float64 tensors), as at::scalar_tensor on CPU.
at::Tensor grad_norm_meta(at::TensorList tensors) {
  return at::empty({}, grad_norm_args(tensors).out_options);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Meta, m) { m.impl("grad_norm", grad_norm_meta); }

}  // namespace kiln::ops
