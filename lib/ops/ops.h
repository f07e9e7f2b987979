// kiln's op library as a C++ API: each function calls the registered op through
// the dispatcher, so the device picks the kernel and autograd records it.
#pragma once
#include <ATen/core/Tensor.h>

namespace kiln::ops {

/// y = max(x, 0), differentiable twice. Example: auto y = kiln::ops::relu(x);
at::Tensor relu(const at::Tensor& x);

/// The gradient of relu given its output: grad where y > 0, else 0.
/// Example: auto gx = kiln::ops::relu_backward(grad_y, y);
at::Tensor relu_backward(const at::Tensor& grad, const at::Tensor& y);

/// True when the CUDA kernels were compiled into this build.
bool built_with_cuda();

}  // namespace kiln::ops
