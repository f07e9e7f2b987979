// Meta kernels of kiln::relu and kiln::relu_backward: the CPU kernels' checks and
// output allocation (elementwise() in op_support.h) without the arithmetic, so the
// output's shape, strides and dtype are known without data.
#include <torch/library.h>

#include "../op_support.h"

namespace kiln::ops {
namespace {

at::Tensor relu_meta(const at::Tensor& x) { return elementwise("kiln::relu", "x", x).out; }

at::Tensor relu_backward_meta(const at::Tensor& grad, const at::Tensor& y) {
  return elementwise("kiln::relu_backward", "grad", grad, "y", y, LayoutFrom::kSecond).out;
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("relu", relu_meta);
  m.impl("relu_backward", relu_backward_meta);
}

}  // namespace kiln::ops
