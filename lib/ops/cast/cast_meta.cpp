// Meta kernel of kiln::cast: its output's shape, strides and dtype without data, as
// the CPU kernel lays it out.
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include "cast_args.h"

namespace kiln::ops {
namespace {

at::Tensor cast_meta(const at::Tensor& x, at::ScalarType dtype) {
  check_cast(x, dtype);
  return at::empty_like(x, x.options().dtype(dtype));
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Meta, m) { m.impl("cast", cast_meta); }

}  // namespace kiln::ops
