// The argument checks the cross-entropy kernels share: shapes, dtypes and devices
// of logits (B, C), target (B), lse (B) and grad (a scalar), run by every backend
// (Meta included), and on the CPU the range of the class indices (an error naming the
// first bad row; the CUDA kernels check it on the device).
#pragma once
#include <string_view>

#include "../op_support.h"

namespace kiln::ops {

/// The dtype lse and the per-row losses accumulate in: float64 for float64 logits, else float32.
inline at::ScalarType cross_entropy_acc_dtype(const at::Tensor& logits) {
  return logits.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

/// Contiguous logits and target, checked; B rows of C classes.
struct CrossEntropyArgs {
  at::Tensor logits, target;
  int64_t rows, classes;
};

/// Throws unless every target lies in [0, classes), naming the first row that does not:
/// the CPU kernels' check, which reads the values in place. The CUDA kernels check
/// their rows' indices themselves, on the device (a device-side assertion with the same
/// message, as ATen's nll_loss does in its kernel): no host sync and no extra launch.
inline void check_targets(std::string_view op, const at::Tensor& target, int64_t classes) {
  TORCH_INTERNAL_ASSERT(target.is_cpu(), op, ": check_targets reads a CPU target in place");
  // One pass over the indices in place (at::aminmax would be an op call and two
  // allocations, most of the op's time at a few rows): an index outside [0, classes)
  // is, as unsigned, at least `classes`.
  const auto* p = target.const_data_ptr<int64_t>();
  const int64_t n = target.numel();
  bool bad = false;
  for (int64_t i = 0; i < n; ++i) bad |= static_cast<uint64_t>(p[i]) >= static_cast<uint64_t>(classes);
  if (!bad) return;
  for (int64_t i = 0; i < n; ++i)
    TORCH_CHECK(p[i] >= 0 && p[i] < classes, op, ": target: expected class indices in [0, ",
                classes, "), got target[", i, "] = ", p[i]);
}

/// The checks that read no data (shapes, dtypes, devices): all that a Meta kernel,
/// which has no class indices to look at, can run.
/// Example: auto a = cross_entropy_metadata_args("kiln::cross_entropy_forward", logits, target);
inline CrossEntropyArgs cross_entropy_metadata_args(std::string_view op, const at::Tensor& logits,
                                                    const at::Tensor& target) {
  check_floating(op, "logits", logits);
  TORCH_CHECK(logits.dim() == 2, op, ": logits: expected a 2-D tensor (B, C), got shape ",
              logits.sizes());
  TORCH_CHECK(target.defined(), op, ": target: expected a tensor, got an undefined one");
  TORCH_CHECK(target.scalar_type() == at::kLong, op,
              ": target: expected dtype Long (int64 class indices), got ", target.scalar_type());
  TORCH_CHECK(target.dim() == 1 && target.size(0) == logits.size(0), op, ": target: expected shape [",
              logits.size(0), "] (one class per row of logits), got ", target.sizes());
  TORCH_CHECK(target.device() == logits.device(), op, ": target: expected device ",
              logits.device(), " (the device of logits), got ", target.device());
  return {logits.contiguous(), target.contiguous(), logits.size(0), logits.size(1)};
}

/// cross_entropy_metadata_args, then the range of the class indices (check_targets):
/// the CPU kernels' arguments. Example: auto a = cross_entropy_args("kiln::cross_entropy_forward", logits, target);
inline CrossEntropyArgs cross_entropy_args(std::string_view op, const at::Tensor& logits,
                                           const at::Tensor& target) {
  auto a = cross_entropy_metadata_args(op, logits, target);
  check_targets(op, a.target, a.classes);
  return a;
}

/// Checks what backward adds: grad one element of the logits' dtype and device,
/// lse (B) of the accumulation dtype.
inline void check_cross_entropy_backward(std::string_view op, const at::Tensor& grad,
                                         const at::Tensor& lse, const CrossEntropyArgs& a) {
  TORCH_CHECK(grad.defined() && grad.numel() == 1, op,
              ": grad: expected one element (the gradient of the mean loss), got shape ",
              grad.defined() ? grad.sizes() : at::IntArrayRef{});
  TORCH_CHECK(grad.scalar_type() == a.logits.scalar_type(), op, ": grad: expected dtype ",
              a.logits.scalar_type(), " (the dtype of logits), got ", grad.scalar_type());
  TORCH_CHECK(grad.device() == a.logits.device(), op, ": grad: expected device ",
              a.logits.device(), " (the device of logits), got ", grad.device());
  TORCH_CHECK(lse.defined(), op, ": lse: expected a tensor, got an undefined one");
  TORCH_CHECK(lse.dim() == 1 && lse.size(0) == a.rows, op, ": lse: expected shape [", a.rows,
              "] (one value per row of logits), got ", lse.sizes());
  TORCH_CHECK(lse.scalar_type() == cross_entropy_acc_dtype(a.logits), op, ": lse: expected dtype ",
              cross_entropy_acc_dtype(a.logits), " (what cross_entropy_forward returns), got ",
              lse.scalar_type());
  TORCH_CHECK(lse.device() == a.logits.device(), op, ": lse: expected device ", a.logits.device(),
              " (the device of logits), got ", lse.device());
}

}  // namespace kiln::ops
