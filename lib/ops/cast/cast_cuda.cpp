// CUDA kernel of kiln::cast: ATen's own cast, which on a GPU is already one
// vectorised kernel at the device's bandwidth (kiln's CPU kernel exists because
// ATen's CPU cast is not: docs/ops.md). Registered so the op runs on every device kiln
// trains on.
#include <ATen/ops/_to_copy.h>
#include <torch/library.h>

#include "cast_args.h"

namespace kiln::ops {
namespace {

at::Tensor cast_cuda(const at::Tensor& x, at::ScalarType dtype) {
  check_cast(x, dtype);
  return at::_to_copy(x, x.options().dtype(dtype));
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CUDA, m) { m.impl("cast", cast_cuda); }

}  // namespace kiln::ops
