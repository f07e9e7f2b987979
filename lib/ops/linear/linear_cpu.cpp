// CPU and Meta kernels of kiln::linear, linear_gelu, linear_relu, linear_gelu_forward
// and linear_backward: the checks, then ATen's addmm / mm (MKL or oneDNN) and the
// activation, or at::mm and kiln's bias pass (linear_aten.cpp).
// The same functions serve Meta: at::addmm, at::mm and at::sum have Meta kernels of
// their own, so on meta tensors they give the CPU outputs' shapes, strides and dtypes
// without data.
#include <torch/library.h>

#include "linear_aten.h"

namespace kiln::ops {
namespace {

using OptTensor = std::optional<at::Tensor>;

at::Tensor linear_cpu(const at::Tensor& x, const at::Tensor& w, const OptTensor& b) {
  linear::check_forward("kiln::linear", x, w, b);
  return linear::forward_aten(x, w, b);
}

at::Tensor linear_gelu_cpu(const at::Tensor& x, const at::Tensor& w, const OptTensor& b) {
  linear::check_forward("kiln::linear_gelu", x, w, b);
  return linear::gelu_aten(x, w, b);
}

at::Tensor linear_relu_cpu(const at::Tensor& x, const at::Tensor& w, const OptTensor& b) {
  linear::check_forward("kiln::linear_relu", x, w, b);
  return linear::relu_aten(x, w, b);
}

std::tuple<at::Tensor, at::Tensor> linear_gelu_forward_cpu(const at::Tensor& x,
                                                           const at::Tensor& w,
                                                           const OptTensor& b) {
  linear::check_forward("kiln::linear_gelu_forward", x, w, b);
  return linear::gelu_forward_aten(x, w, b);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_backward_cpu(const at::Tensor& grad,
                                                                   const at::Tensor& x,
                                                                   const at::Tensor& w,
                                                                   std::array<bool, 3> output_mask) {
  linear::check_backward("kiln::linear_backward", grad, x, w);
  return linear::backward_aten(grad, x, w, output_mask);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("linear", linear_cpu);
  m.impl("linear_gelu", linear_gelu_cpu);
  m.impl("linear_relu", linear_relu_cpu);
  m.impl("linear_gelu_forward", linear_gelu_forward_cpu);
  m.impl("linear_backward", linear_backward_cpu);
}

TORCH_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("linear", linear_cpu);
  m.impl("linear_gelu", linear_gelu_cpu);
  m.impl("linear_relu", linear_relu_cpu);
  m.impl("linear_gelu_forward", linear_gelu_forward_cpu);
  m.impl("linear_backward", linear_backward_cpu);
}

}  // namespace kiln::ops
