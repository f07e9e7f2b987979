// CPU kernels of kiln::scaled_add and kiln::scaled_add_backward as registered
// Tensor functions: check, make contiguous, allocate, split over threads, call
// the vectorised raw kernel built for this CPU.
#include <torch/library.h>

#include "../op_support.h"
#include "scaled_add_args.h"
#include "scaled_add_kernel.h"

namespace kiln::ops {
namespace {

// float32 with a half type: the half side widened in registers, the output float32.
at::Tensor scaled_add_mixed_cpu(const at::Tensor& x, const at::Tensor& y, double alpha) {
  auto m = mixed_pair("kiln::scaled_add", x, y);
  const bool x_low = m.x.scalar_type() != at::kFloat;
  const auto low = kernel_dtype(x_low ? m.x : m.y);
  const auto kernel = cpu::scaled_add_forward_mixed_impl();
  auto* out = m.out.data_ptr<float>();
  parallel_chunks(m.out.numel(), [&](int64_t begin, int64_t end) {
    kernel(low, x_low, elem_ptr(m.x, begin), elem_ptr(m.y, begin), out + begin, end - begin, alpha);
  });
  return m.out;
}

at::Tensor scaled_add_cpu(const at::Tensor& x, const at::Tensor& y, double alpha) {
  if (is_mixed_pair(x, y)) return scaled_add_mixed_cpu(x, y, alpha);
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
// ATen's add backward. With x_dtype a half type and grad float32 (a mixed forward's),
// the first is rounded to x_dtype in the same pass.
std::tuple<at::Tensor, at::Tensor> scaled_add_backward_cpu(const at::Tensor& grad, double alpha,
                                                           std::optional<at::ScalarType> x_dtype) {
  const char* op = "kiln::scaled_add_backward";
  const auto gx_dtype = x_grad_dtype(op, grad, x_dtype);
  if (gx_dtype != grad.scalar_type()) {
    const auto g = dense(grad);
    auto gx = output_like(g, gx_dtype);
    const auto low = kernel_dtype(gx);
    const auto kernel = cpu::scaled_add_scale_to_impl();
    const auto* in = g.const_data_ptr<float>();
    parallel_chunks(g.numel(), [&](int64_t begin, int64_t end) {
      kernel(low, in + begin, elem_ptr(gx, begin), end - begin, alpha);
    });
    return {gx, grad};
  }
  auto e = elementwise(op, "grad", grad);
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
