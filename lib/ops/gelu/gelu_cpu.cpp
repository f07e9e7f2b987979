// CPU kernels of kiln::gelu and kiln::gelu_backward as registered Tensor functions.
#include <torch/library.h>

#include "../op_support.h"
#include "gelu_kernel.h"

namespace kiln::ops {
namespace {

at::Tensor gelu_cpu(const at::Tensor& x) {
  auto e = elementwise("kiln::gelu", "x", x);
  const auto dtype = kernel_dtype(e.x);
  const auto kernel = cpu::gelu_forward_impl();
  parallel_chunks(e.x.numel(), [&](int64_t begin, int64_t end) {
    kernel(dtype, elem_ptr(e.x, begin), elem_ptr(e.out, begin), end - begin);
  });
  return e.out;
}

at::Tensor gelu_backward_cpu(const at::Tensor& grad, const at::Tensor& x) {
  auto e = elementwise("kiln::gelu_backward", "grad", grad, "x", x);
  const auto dtype = kernel_dtype(e.a);
  const auto kernel = cpu::gelu_backward_impl();
  parallel_chunks(e.a.numel(), [&](int64_t begin, int64_t end) {
    kernel(dtype, elem_ptr(e.a, begin), elem_ptr(e.b, begin), elem_ptr(e.out, begin), end - begin);
  });
  return e.out;
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("gelu", gelu_cpu);
  m.impl("gelu_backward", gelu_backward_cpu);
}

}  // namespace kiln::ops
