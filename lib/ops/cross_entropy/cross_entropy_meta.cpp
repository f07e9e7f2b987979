// Meta kernels of kiln::cross_entropy_forward and kiln::cross_entropy_backward: the
// checks the CPU and CUDA kernels share (cross_entropy_args.h) and their outputs'
// allocation without the arithmetic. kiln::cross_entropy itself needs none: it is
// CompositeImplicitAutograd, so on meta tensors it runs these two (a Meta kernel
// of its own would also take it away from its autograd Function on meta).
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "cross_entropy_args.h"

namespace kiln::ops {
namespace {

// loss: a 0-dim tensor of logits' dtype; lse: (B) in cross_entropy_acc_dtype.
// The range of the class indices is not checked: it needs target's values, which a
// meta tensor does not have (cross_entropy_metadata_args skips only that check).
std::tuple<at::Tensor, at::Tensor> cross_entropy_forward_meta(const at::Tensor& logits,
                                                              const at::Tensor& target) {
  const auto a = cross_entropy_metadata_args("kiln::cross_entropy_forward", logits, target);
  return {at::empty({}, logits.options()),
          at::empty({a.rows}, logits.options().dtype(cross_entropy_acc_dtype(logits)))};
}

// grad_logits: like logits, contiguous. Target values unchecked, as above.
at::Tensor cross_entropy_backward_meta(const at::Tensor& grad, const at::Tensor& logits,
                                       const at::Tensor& target, const at::Tensor& lse) {
  const char* op = "kiln::cross_entropy_backward";
  const auto a = cross_entropy_metadata_args(op, logits, target);
  check_cross_entropy_backward(op, grad, lse, a);
  return output_like(a.logits);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("cross_entropy_forward", cross_entropy_forward_meta);
  m.impl("cross_entropy_backward", cross_entropy_backward_meta);
}

}  // namespace kiln::ops
