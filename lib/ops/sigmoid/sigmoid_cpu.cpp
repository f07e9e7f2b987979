// CPU kernels of kiln::sigmoid and kiln::sigmoid_backward as registered Tensor
// functions: check, make contiguous, allocate, split over threads, call the
// vectorised raw kernel built for this CPU.
#include <torch/library.h>

#include "../op_support.h"
#include "sigmoid_args.h"
#include "sigmoid_kernel.h"

namespace kiln::ops {
namespace {

at::Tensor sigmoid_cpu(const at::Tensor& x, double beta, std::optional<double> grad_clip) {
  sigmoid_clip("kiln::sigmoid", grad_clip);  // checked here too: forward is where the caller errs
  auto e = elementwise("kiln::sigmoid", "x", x);
  const auto dtype = kernel_dtype(e.x);
  const auto kernel = cpu::sigmoid_forward_impl();
  const auto stores = streaming_stores(2 * e.out.nbytes());
  parallel_chunks(e.x.numel(), [&](int64_t begin, int64_t end) {
    kernel(dtype, elem_ptr(e.x, begin), elem_ptr(e.out, begin), end - begin, beta, stores);
  });
  return e.out;
}

at::Tensor sigmoid_backward_cpu(const at::Tensor& grad, const at::Tensor& s, double beta,
                                std::optional<double> grad_clip) {
  const double clip = sigmoid_clip("kiln::sigmoid_backward", grad_clip);
  auto e = elementwise("kiln::sigmoid_backward", "grad", grad, "s", s, LayoutFrom::kSecond);
  const auto dtype = kernel_dtype(e.a);
  const auto kernel = cpu::sigmoid_backward_impl();
  const auto stores = streaming_stores(3 * e.out.nbytes());
  parallel_chunks(e.a.numel(), [&](int64_t begin, int64_t end) {
    kernel(dtype, elem_ptr(e.a, begin), elem_ptr(e.b, begin), elem_ptr(e.out, begin), end - begin,
           beta, clip, stores);
  });
  return e.out;
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("sigmoid", sigmoid_cpu);
  m.impl("sigmoid_backward", sigmoid_backward_cpu);
}

}  // namespace kiln::ops
