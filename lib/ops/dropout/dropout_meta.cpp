// Meta kernel of kiln::dropout: the CPU kernel's checks and its contiguous output,
// without the arithmetic.
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "../op_support.h"
#include "dropout_args.h"

namespace kiln::ops {
namespace {

at::Tensor dropout_meta(const at::Tensor& x, double p, int64_t /*seed*/) {
  return at::empty(x.sizes(), dropout_call(x, p).x.options());
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Meta, m) { m.impl("dropout", dropout_meta); }

}  // namespace kiln::ops
