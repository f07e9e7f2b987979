// gelu''(x) of the tanh form in plain ATen, for the gradients of gelu_backward
// and bias_gelu_backward (defined in gelu.cpp).
#pragma once
#include <ATen/core/Tensor.h>

namespace kiln::ops::detail {

/// s(1−s)·(4u' + 2x·u'' + 4x·u'²·(1−2s)), s = σ(2u); differentiable again.
at::Tensor gelu_second_derivative(const at::Tensor& x);

}  // namespace kiln::ops::detail
