// Meta kernels of kiln::sigmoid and kiln::sigmoid_backward: the CPU kernels' checks
// (grad_clip, then elementwise() in op_support.h) and output allocation without the
// arithmetic, so the output's shape, strides and dtype are known without data.
#include <torch/library.h>

#include "../op_support.h"
#include "sigmoid_args.h"

namespace kiln::ops {
namespace {

at::Tensor sigmoid_meta(const at::Tensor& x, double /*beta*/, std::optional<double> grad_clip) {
  sigmoid_clip("kiln::sigmoid", grad_clip);
  return elementwise("kiln::sigmoid", "x", x).out;
}

at::Tensor sigmoid_backward_meta(const at::Tensor& grad, const at::Tensor& s, double /*beta*/,
                                 std::optional<double> grad_clip) {
  sigmoid_clip("kiln::sigmoid_backward", grad_clip);
  return elementwise("kiln::sigmoid_backward", "grad", grad, "s", s, LayoutFrom::kSecond).out;
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("sigmoid", sigmoid_meta);
  m.impl("sigmoid_backward", sigmoid_backward_meta);
}

}  // namespace kiln::ops
