// CPU kernels of kiln::gelu and kiln::gelu_backward as registered Tensor functions:
// the shared elementwise runner around the vectorised kernel built for this CPU.
#include <torch/library.h>

#include "../op_support.h"
#include "gelu_kernel.h"

namespace kiln::ops {
namespace {

at::Tensor gelu_cpu(const at::Tensor& x) {
  return cpu_unary("kiln::gelu", "x", x, cpu::gelu_forward_impl());
}

at::Tensor gelu_backward_cpu(const at::Tensor& grad, const at::Tensor& x) {
  return cpu_binary("kiln::gelu_backward", "grad", grad, "x", x, cpu::gelu_backward_impl(), LayoutFrom::kSecond);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("gelu", gelu_cpu);
  m.impl("gelu_backward", gelu_backward_cpu);
}

}  // namespace kiln::ops
