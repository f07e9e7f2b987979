// Meta kernels of kiln::scaled_add and kiln::scaled_add_backward: the CPU kernels'
// checks and output allocation (elementwise() in op_support.h) without the
// arithmetic, so the outputs' shapes, strides and dtypes are known without data.
#include <torch/library.h>

#include "../op_support.h"
#include "scaled_add_args.h"

namespace kiln::ops {
namespace {

at::Tensor scaled_add_meta(const at::Tensor& x, const at::Tensor& y, double /*alpha*/) {
  if (is_mixed_pair(x, y)) return mixed_pair("kiln::scaled_add", x, y).out;
  return elementwise("kiln::scaled_add", "x", x, "y", y).out;
}

// (alpha·grad, grad): as on CPU and CUDA the second output is grad itself, the
// alias the schema declares (Tensor(a) grad -> (Tensor, Tensor(a))).
std::tuple<at::Tensor, at::Tensor> scaled_add_backward_meta(const at::Tensor& grad, double /*alpha*/,
                                                            std::optional<at::ScalarType> x_dtype) {
  const char* op = "kiln::scaled_add_backward";
  const auto gx_dtype = x_grad_dtype(op, grad, x_dtype);
  return {elementwise(op, "grad", grad).out.to(gx_dtype), grad};
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("scaled_add", scaled_add_meta);
  m.impl("scaled_add_backward", scaled_add_backward_meta);
}

}  // namespace kiln::ops
