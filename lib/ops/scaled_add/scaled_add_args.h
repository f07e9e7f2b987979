// The mixed-dtype cases of kiln::scaled_add that its CPU, CUDA and Meta kernels share:
// float32 with float16 or bfloat16 computes in float32 (as ATen's add promotes), so
// autocast's float32 residual stream takes a half-type branch without a float32 copy
// of it, and the branch's gradient comes back in its own dtype in one pass.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/Exception.h>

#include <optional>
#include <string_view>

#include "../op_support.h"

namespace kiln::ops {

inline bool is_half_type(at::ScalarType s) { return s == at::kHalf || s == at::kBFloat16; }

/// Whether x and y are a pair scaled_add takes in float32: one float32, the other
/// float16 or bfloat16. Other dtype pairs get the one-dtype checks (and their errors).
inline bool is_mixed_pair(const at::Tensor& x, const at::Tensor& y) {
  if (!x.defined() || !y.defined()) return false;
  const auto a = x.scalar_type(), b = y.scalar_type();
  return (a == at::kFloat && is_half_type(b)) || (is_half_type(a) && b == at::kFloat);
}

/// A mixed pair laid out alike (x's layout where x is dense, else both contiguous) and
/// its float32 output in that layout; shapes and devices checked as elementwise() does.
struct MixedPair {
  at::Tensor x, y, out;
};
inline MixedPair mixed_pair(std::string_view op, const at::Tensor& x, const at::Tensor& y) {
  TORCH_CHECK(x.sizes() == y.sizes(), op, ": y: expected shape ", x.sizes(), " (the shape of x), got ",
              y.sizes());
  TORCH_CHECK(x.device() == y.device(), op, ": y: expected device ", x.device(),
              " (the device of x), got ", y.device());
  auto xc = dense(x), yc = dense(y);
  if (xc.strides() != yc.strides()) {
    if (x.is_non_overlapping_and_dense()) {
      yc = at::empty_strided(x.sizes(), x.strides(), y.options()).copy_(y);
    } else {
      xc = x.contiguous();
      yc = y.contiguous();
    }
  }
  auto out = at::empty_strided(xc.sizes(), xc.strides(), xc.options().dtype(at::kFloat));
  advise_huge_pages(out);
  return {std::move(xc), std::move(yc), std::move(out)};
}

/// The dtype scaled_add_backward gives x's gradient: grad's own, or with x_dtype a
/// half type while grad is float32 (a mixed forward's), that half type.
inline at::ScalarType x_grad_dtype(std::string_view op, const at::Tensor& grad,
                                   std::optional<at::ScalarType> x_dtype) {
  check_floating(op, "grad", grad);
  if (!x_dtype || *x_dtype == grad.scalar_type()) return grad.scalar_type();
  TORCH_CHECK(grad.scalar_type() == at::kFloat && is_half_type(*x_dtype), op,
              ": x_dtype: expected grad's dtype (", grad.scalar_type(),
              ") or, with a Float grad, Half or BFloat16, got ", *x_dtype);
  return *x_dtype;
}

}  // namespace kiln::ops
