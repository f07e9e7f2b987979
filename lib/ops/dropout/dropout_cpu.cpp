// CPU kernel of kiln::dropout as a registered Tensor function: check, make
// contiguous (the mask follows the elements' row-major index, so a backward's
// gradient in another layout draws the same mask), allocate, split over threads,
// call the vectorised raw kernel built for this CPU.
#include <torch/library.h>

#include "../op_support.h"
#include "dropout_args.h"
#include "dropout_kernel.h"

namespace kiln::ops {
namespace {

at::Tensor dropout_cpu(const at::Tensor& x, double p, int64_t seed) {
  const auto [k, xc] = dropout_call(x, p);
  if (p == 0.0) return xc.clone();
  auto out = output_like(xc);
  const auto dtype = kernel_dtype(xc);
  const auto kernel = cpu::dropout_impl();
  const auto stores = streaming_stores(2 * out.nbytes());
  parallel_chunks(xc.numel(), [&](int64_t begin, int64_t end) {
    kernel(dtype, elem_ptr(xc, begin), elem_ptr(out, begin), begin, end - begin,
           static_cast<uint64_t>(seed), k.keep_below, k.scale, stores);
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CPU, m) { m.impl("dropout", dropout_cpu); }

}  // namespace kiln::ops
