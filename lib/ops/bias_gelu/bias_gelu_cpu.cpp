// CPU kernels of kiln::bias_gelu and kiln::bias_gelu_backward: rows split over
// threads; backward sums db per chunk of rows and adds the chunks in order, so the
// result does not depend on which thread ran which chunk.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "bias_gelu_args.h"
#include "bias_gelu_kernel.h"

namespace kiln::ops {
namespace {

// Rows per task: about kElementwiseGrain elements.
int64_t rows_per_chunk(int64_t n) { return std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n, 1)); }

at::Tensor bias_gelu_cpu(const at::Tensor& x, const at::Tensor& b) {
  const auto a = bias_gelu_args("kiln::bias_gelu", x, b);
  auto y = output_like(a.x);
  const auto dtype = kernel_dtype(a.x);
  const auto kernel = cpu::bias_gelu_forward_impl();
  at::parallel_for(0, a.rows, rows_per_chunk(a.n), [&](int64_t r0, int64_t r1) {
    kernel(dtype, elem_ptr(a.x, r0 * a.n), a.b.const_data_ptr(), elem_ptr(y, r0 * a.n), r1 - r0, a.n);
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor> bias_gelu_backward_cpu(const at::Tensor& grad,
                                                          const at::Tensor& x,
                                                          const at::Tensor& b) {
  auto args = bias_gelu_backward_args(grad, x, b);
  const auto& a = args.in;
  const auto& g = args.grad;
  auto& dx = args.dx;
  const int64_t per_chunk = rows_per_chunk(a.n);
  const int64_t chunks = std::max<int64_t>(1, (a.rows + per_chunk - 1) / per_chunk);
  auto partial = at::zeros({chunks, a.n}, x.options().dtype(args.acc_type));  // (chunks, n)
  const auto dtype = kernel_dtype(a.x);
  const auto kernel = cpu::bias_gelu_backward_impl();
  at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t r0 = c * per_chunk, r1 = std::min(a.rows, r0 + per_chunk);
      if (r0 >= r1) continue;
      kernel(dtype, elem_ptr(g, r0 * a.n), elem_ptr(a.x, r0 * a.n), a.b.const_data_ptr(),
             elem_ptr(dx, r0 * a.n), elem_ptr(partial, c * a.n), r1 - r0, a.n);
    }
  });
  return {dx, partial.sum(0).to(b.scalar_type())};
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("bias_gelu", bias_gelu_cpu);
  m.impl("bias_gelu_backward", bias_gelu_backward_cpu);
}

}  // namespace kiln::ops
