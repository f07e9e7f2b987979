// The checks kiln::layer_norm's CPU, CUDA and Meta kernels share, and the shapes and
// dtypes of its outputs.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <optional>
#include <string_view>

#include "../op_support.h"

namespace kiln::ops {

/// The sizes of a layer norm over x's last dimension: rows × c.
struct LayerNormSizes {
  int64_t rows = 0, c = 0;
};

/// The accumulation dtype of mean and rstd: float32, or float64 for a float64 x.
inline at::ScalarType layer_norm_acc_dtype(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

/// The output dtype: x's, or with out_dtype a half type for a float32 x, that one.
inline at::ScalarType layer_norm_out_dtype(std::string_view op, const at::Tensor& x,
                                           std::optional<at::ScalarType> out_dtype) {
  if (!out_dtype || *out_dtype == x.scalar_type()) return x.scalar_type();
  TORCH_CHECK(x.scalar_type() == at::kFloat && (*out_dtype == at::kHalf || *out_dtype == at::kBFloat16),
              op, ": out_dtype: expected x's dtype (", x.scalar_type(),
              ") or, for a Float x, Half or BFloat16, got ", *out_dtype);
  return *out_dtype;
}

inline void check_layer_norm_param(std::string_view op, std::string_view name,
                                   const std::optional<at::Tensor>& p, const at::Tensor& x) {
  if (!p || !p->defined()) return;
  TORCH_CHECK(p->dim() == 1 && p->size(0) == x.size(-1), op, ": ", name, ": expected shape [",
              x.size(-1), "] (x's last dimension), got ", p->sizes());
  TORCH_CHECK(p->scalar_type() == x.scalar_type(), op, ": ", name, ": expected dtype ", x.scalar_type(),
              " (the dtype of x), got ", p->scalar_type());
  TORCH_CHECK(p->device() == x.device(), op, ": ", name, ": expected device ", x.device(),
              " (the device of x), got ", p->device());
}

/// x: floating, at least 1-D, its last dimension > 0; weight, bias: (c) like x; eps ≥ 0.
inline LayerNormSizes layer_norm_sizes(std::string_view op, const at::Tensor& x,
                                       const std::optional<at::Tensor>& weight,
                                       const std::optional<at::Tensor>& bias, double eps) {
  check_floating(op, "x", x);
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, op,
              ": x: expected at least one dimension, the last (normalised) one > 0, got shape ",
              x.sizes());
  check_layer_norm_param(op, "weight", weight, x);
  check_layer_norm_param(op, "bias", bias, x);
  TORCH_CHECK(std::isfinite(eps) && eps >= 0, op, ": eps: expected a finite value >= 0, got ", eps);
  return {x.numel() / x.size(-1), x.size(-1)};
}

/// The backward's saved tensors against x: grad like the forward's output (x's shape,
/// x's dtype or the half type a float32 x was normalised into), mean and rstd of
/// x's shape without its last dimension in the accumulation dtype.
inline void check_layer_norm_backward(std::string_view op, const at::Tensor& grad, const at::Tensor& x,
                                      const at::Tensor& mean, const at::Tensor& rstd) {
  TORCH_CHECK(grad.defined(), op, ": grad: expected a tensor, got an undefined one");
  TORCH_CHECK(grad.sizes() == x.sizes(), op, ": grad: expected shape ", x.sizes(), " (the shape of x), got ",
              grad.sizes());
  layer_norm_out_dtype(op, x, grad.scalar_type());  // grad: x's dtype, or a half type for float32
  TORCH_CHECK(grad.device() == x.device(), op, ": grad: expected device ", x.device(), ", got ", grad.device());
  const auto rows = x.sizes().slice(0, x.dim() - 1);
  for (const auto& [name, t] : {std::pair{"mean", &mean}, std::pair{"rstd", &rstd}}) {
    TORCH_CHECK(t->defined() && t->sizes() == rows && t->scalar_type() == layer_norm_acc_dtype(x) &&
                    t->device() == x.device(),
                op, ": ", name, ": expected shape ", rows, " and dtype ", layer_norm_acc_dtype(x),
                " (x's shape without its last dimension; the forward's), got ",
                t->defined() ? t->sizes() : c10::IntArrayRef{}, " ",
                t->defined() ? t->scalar_type() : at::ScalarType::Undefined);
  }
}

}  // namespace kiln::ops
