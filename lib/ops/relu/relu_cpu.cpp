// CPU kernels of kiln::relu and kiln::relu_backward as registered Tensor
// functions: check, make contiguous, allocate, split over threads, call the
// vectorised raw kernel built for this CPU.
#include <torch/library.h>

#include "../op_support.h"
#include "relu_kernel.h"

namespace kiln::ops {
namespace {

at::Tensor relu_cpu(const at::Tensor& x) {
  check_floating("kiln::relu", "x", x);
  const auto xc = x.contiguous();
  auto y = at::empty_like(xc, at::MemoryFormat::Contiguous);
  const auto dtype = kernel_dtype(xc);
  const auto kernel = cpu::relu_forward_impl();
  parallel_chunks(xc.numel(), [&](int64_t begin, int64_t end) {
    kernel(dtype, elem_ptr(xc, begin), elem_ptr(y, begin), end - begin);
  });
  return y;
}

at::Tensor relu_backward_cpu(const at::Tensor& grad, const at::Tensor& y) {
  check_floating("kiln::relu_backward", "grad", grad);
  check_like("kiln::relu_backward", "grad", grad, "y", y);
  const auto gc = grad.contiguous();
  const auto yc = y.contiguous();
  auto gx = at::empty_like(gc, at::MemoryFormat::Contiguous);
  const auto dtype = kernel_dtype(gc);
  const auto kernel = cpu::relu_backward_impl();
  parallel_chunks(gc.numel(), [&](int64_t begin, int64_t end) {
    kernel(dtype, elem_ptr(gc, begin), elem_ptr(yc, begin), elem_ptr(gx, begin), end - begin);
  });
  return gx;
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("relu", relu_cpu);
  m.impl("relu_backward", relu_backward_cpu);
}

}  // namespace kiln::ops
