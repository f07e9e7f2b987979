// CPU kernels of kiln::relu and kiln::relu_backward as registered Tensor
// functions: check, make contiguous, allocate, split over threads, call the
// vectorised raw kernel built for this CPU.
#include <torch/library.h>

#include "../op_support.h"
#include "relu_kernel.h"

namespace kiln::ops {
namespace {

at::Tensor relu_cpu(const at::Tensor& x) {
  auto e = elementwise("kiln::relu", "x", x);
  const auto dtype = kernel_dtype(e.x);
  const auto kernel = cpu::relu_forward_impl();
  parallel_chunks(e.x.numel(), [&](int64_t begin, int64_t end) {
    kernel(dtype, elem_ptr(e.x, begin), elem_ptr(e.out, begin), end - begin);
  });
  return e.out;
}

at::Tensor relu_backward_cpu(const at::Tensor& grad, const at::Tensor& y) {
  auto e = elementwise("kiln::relu_backward", "grad", grad, "y", y);
  const auto dtype = kernel_dtype(e.a);
  const auto kernel = cpu::relu_backward_impl();
  parallel_chunks(e.a.numel(), [&](int64_t begin, int64_t end) {
    kernel(dtype, elem_ptr(e.a, begin), elem_ptr(e.b, begin), elem_ptr(e.out, begin), end - begin);
  });
  return e.out;
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("relu", relu_cpu);
  m.impl("relu_backward", relu_backward_cpu);
}

}  // namespace kiln::ops
