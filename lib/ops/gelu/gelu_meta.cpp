// Meta kernels of kiln::gelu and kiln::gelu_backward: the CPU kernels' checks and
// output allocation (elementwise() in op_support.h) without the arithmetic, so the
// output's shape, strides and dtype are known without data.
#include <torch/library.h>

#include "../op_support.h"

namespace kiln::ops {
namespace {

at::Tensor gelu_meta(const at::Tensor& x) { return elementwise("kiln::gelu", "x", x).out; }

at::Tensor gelu_backward_meta(const at::Tensor& grad, const at::Tensor& x) {
  return elementwise("kiln::gelu_backward", "grad", grad, "x", x, LayoutFrom::kSecond).out;
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("gelu", gelu_meta);
  m.impl("gelu_backward", gelu_backward_meta);
}

}  // namespace kiln::ops
