// Meta kernels of kiln::linear, linear_gelu, linear_gelu_forward and
// linear_backward: the checks every backend shares (linear_aten.h), then the ATen
// formulation that is also the CPU kernel. at::addmm, at::mm, at::gelu and at::sum
// have Meta kernels of their own, so on meta tensors it computes only the outputs'
// shapes, strides and dtypes, exactly those of the CPU kernel's outputs.
#include <torch/library.h>

#include "linear_aten.h"

namespace kiln::ops {
namespace {

using OptTensor = std::optional<at::Tensor>;

// z: (B, N), contiguous, x's dtype.
at::Tensor linear_meta(const at::Tensor& x, const at::Tensor& w, const OptTensor& b) {
  linear::check_forward("kiln::linear", x, w, b);
  return linear::forward_aten(x, w, b);
}

at::Tensor linear_gelu_meta(const at::Tensor& x, const at::Tensor& w, const OptTensor& b) {
  linear::check_forward("kiln::linear_gelu", x, w, b);
  return linear::gelu_aten(x, w, b);
}

// (y, z), both (B, N), contiguous.
std::tuple<at::Tensor, at::Tensor> linear_gelu_forward_meta(const at::Tensor& x,
                                                            const at::Tensor& w,
                                                            const OptTensor& b) {
  linear::check_forward("kiln::linear_gelu_forward", x, w, b);
  return linear::gelu_forward_aten(x, w, b);
}

// dx like x, dw like w (both contiguous), db (N); undefined where output_mask says no.
std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_backward_meta(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& w,
    std::array<bool, 3> output_mask) {
  linear::check_backward("kiln::linear_backward", grad, x, w);
  return linear::backward_aten(grad, x, w, output_mask);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("linear", linear_meta);
  m.impl("linear_gelu", linear_gelu_meta);
  m.impl("linear_gelu_forward", linear_gelu_forward_meta);
  m.impl("linear_backward", linear_backward_meta);
}

}  // namespace kiln::ops
