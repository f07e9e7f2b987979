// CPU kernel of kiln::grad_norm: one parallel pass over the elements of all
// tensors together, in fixed blocks whose sums are added in order, so the result
// does not depend on the thread count.
#include <ATen/Parallel.h>
#include <ATen/ops/scalar_tensor.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>

#include "grad_norm_args.h"
#include "grad_norm_kernel.h"

namespace kiln::ops {
namespace {

constexpr int64_t kBlock = 65536;  // elements per partial sum

at::Tensor grad_norm_cpu(at::TensorList tensors) {
  const auto a = grad_norm_args(tensors);
  // offsets[t]: the index of tensor t's first element in the concatenation.
  std::vector<int64_t> offsets = {0};
  for (const auto& t : a.tensors) offsets.push_back(offsets.back() + t.numel());
  const int64_t total = offsets.back();
  const int64_t blocks = (total + kBlock - 1) / kBlock;
  std::vector<double> partial(blocks, 0.0);
  const auto kernel = cpu::grad_norm_sumsq_impl();
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t lo = b * kBlock, hi = std::min(total, lo + kBlock);
      // The tensor holding element lo, then each tensor the block reaches into.
      size_t t = std::upper_bound(offsets.begin(), offsets.end(), lo) - offsets.begin() - 1;
      for (int64_t i = lo; i < hi; ++t) {
        const int64_t end = std::min(hi, offsets[t + 1]);
        if (end > i) {
          double s = 0;
          kernel(a.dtype, elem_ptr(a.tensors[t], i - offsets[t]), end - i, &s);
          partial[b] += s;
        }
        i = std::max(i, end);
      }
    }
  });
  double sum = 0;
  for (const double s : partial) sum += s;
  return at::scalar_tensor(std::sqrt(sum), a.out_options);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CPU, m) { m.impl("grad_norm", grad_norm_cpu); }

}  // namespace kiln::ops
