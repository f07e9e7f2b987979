// CPU kernel of kiln::cast as a registered Tensor function: float32 to and from
// bfloat16 or float16 through the vectorised kernel built for this CPU, over threads;
// any other pair of floating dtypes through ATen's own cast.
#include <ATen/ops/_to_copy.h>
#include <ATen/ops/empty_strided.h>
#include <torch/library.h>

#include "../cpu_bf16.h"
#include "cast_args.h"
#include "cast_kernel.h"

namespace kiln::ops {
namespace {

at::Tensor cast_cpu(const at::Tensor& x, at::ScalarType dtype) {
  check_cast(x, dtype);
  const auto from = kernel_dtype(x);
  const auto to = kernel_dtype(dtype);
  // A tensor the kernel cannot walk in one run (a view with gaps) and the pairs it
  // does not convert keep ATen's semantics exactly, strides included.
  if (!cpu::cast_supported(from, to) || !x.is_non_overlapping_and_dense())
    return at::_to_copy(x, x.options().dtype(dtype));
  auto out = at::empty_strided(x.sizes(), x.strides(), x.options().dtype(dtype));
  advise_huge_pages(out);
  const auto stores = streaming_stores(x.nbytes() + out.nbytes());
  const bool native = cpu_has_avx512_bf16();
  const auto kernel = cpu::cast_values_impl();
  parallel_chunks(x.numel(), [&](int64_t begin, int64_t end) {
    kernel(from, elem_ptr(x, begin), to, elem_ptr(out, begin), end - begin, stores, native);
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CPU, m) { m.impl("cast", cast_cpu); }

}  // namespace kiln::ops
