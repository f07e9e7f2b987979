// CPU kernels of kiln::scaled_add and kiln::scaled_add_backward as registered
// Tensor functions: check, make contiguous, allocate, split over threads, call
// the vectorised raw kernel built for this CPU.
#include <torch/library.h>

#include "../op_support.h"
#include "scaled_add_kernel.h"

namespace kiln::ops {
namespace {

at::Tensor scaled_add_cpu(const at::Tensor& x, const at::Tensor& y, double alpha) {
  auto e = elementwise("kiln::scaled_add", "x", x, "y", y);
  const auto dtype = kernel_dtype(e.a);
  const auto kernel = cpu::scaled_add_forward_impl();
  const auto stores = streaming_stores(3 * e.out.nbytes());
  parallel_chunks(e.a.numel(), [&](int64_t begin, int64_t end) {
    kernel(dtype, elem_ptr(e.a, begin), elem_ptr(e.b, begin), elem_ptr(e.out, begin), end - begin,
           alpha, stores);
  });
  return e.out;
}

// (alpha·grad, grad): the second gradient is grad itself, not a copy, as in
// ATen's add backward.
std::tuple<at::Tensor, at::Tensor> scaled_add_backward_cpu(const at::Tensor& grad, double alpha) {
  auto e = elementwise("kiln::scaled_add_backward", "grad", grad);
  const auto dtype = kernel_dtype(e.x);
  const auto kernel = cpu::scaled_add_scale_impl();
  const auto stores = streaming_stores(2 * e.out.nbytes());
  parallel_chunks(e.x.numel(), [&](int64_t begin, int64_t end) {
    kernel(dtype, elem_ptr(e.x, begin), elem_ptr(e.out, begin), end - begin, alpha, stores);
  });
  return {e.out, grad};
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("scaled_add", scaled_add_cpu);
  m.impl("scaled_add_backward", scaled_add_backward_cpu);
}

}  // namespace kiln::ops
