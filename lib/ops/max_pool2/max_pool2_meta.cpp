// Meta kernels of kiln::max_pool2_forward and kiln::max_pool2_backward: the CPU
// kernels' checks and outputs' shapes and layouts without the arithmetic.
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "max_pool2_args.h"

namespace kiln::ops {
namespace {

std::tuple<at::Tensor, at::Tensor> max_pool2_forward_meta(const at::Tensor& x) {
  const bool cl = max_pool2_channels_last(x);
  const auto s = max_pool2_shape("kiln::max_pool2_forward", x, cl);
  const auto o = x.options().memory_format(max_pool2_format(cl));
  return {at::empty({s.n, s.c, s.oh(), s.ow()}, o), at::empty({s.n, s.c, s.oh(), s.ow()}, o.dtype(at::kByte))};
}

at::Tensor max_pool2_backward_meta(const at::Tensor& grad, const at::Tensor& code, at::IntArrayRef input_size,
                                   bool channels_last) {
  max_pool2_backward_shape("kiln::max_pool2_backward", grad, code, input_size, channels_last);
  return at::empty(input_size, grad.options().memory_format(max_pool2_format(channels_last)));
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("max_pool2_forward", max_pool2_forward_meta);
  m.impl("max_pool2_backward", max_pool2_backward_meta);
}

}  // namespace kiln::ops
