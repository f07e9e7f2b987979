// CPU kernels of kiln::relu and kiln::relu_backward as registered Tensor functions:
// the shared elementwise runner around the vectorised kernel built for this CPU.
#include <torch/library.h>

#include "../op_support.h"
#include "relu_kernel.h"

namespace kiln::ops {
namespace {

at::Tensor relu_cpu(const at::Tensor& x) {
  return cpu_unary("kiln::relu", "x", x, cpu::relu_forward_impl());
}

at::Tensor relu_backward_cpu(const at::Tensor& grad, const at::Tensor& y) {
  return cpu_binary("kiln::relu_backward", "grad", grad, "y", y, cpu::relu_backward_impl(), LayoutFrom::kSecond);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("relu", relu_cpu);
  m.impl("relu_backward", relu_backward_cpu);
}

}  // namespace kiln::ops
