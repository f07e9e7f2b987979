// Meta kernels of kiln::layer_norm_forward and kiln::layer_norm_backward: the checks
// the CPU and CUDA kernels share (layer_norm_args.h) and their outputs' shapes and
// dtypes without the arithmetic. kiln::layer_norm itself is CompositeImplicitAutograd.
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "layer_norm_args.h"

namespace kiln::ops {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_forward_meta(
    const at::Tensor& x, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    double eps, std::optional<at::ScalarType> out_dtype) {
  const char* op = "kiln::layer_norm_forward";
  layer_norm_sizes(op, x, weight, bias, eps);
  const auto rows = x.sizes().slice(0, x.dim() - 1);
  const auto acc = x.options().dtype(layer_norm_acc_dtype(x));
  return {at::empty(x.sizes(), x.options().dtype(layer_norm_out_dtype(op, x, out_dtype))),
          at::empty(rows, acc), at::empty(rows, acc)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward_meta(
    const at::Tensor& grad, const at::Tensor& x, const std::optional<at::Tensor>& weight,
    const at::Tensor& mean, const at::Tensor& rstd, std::array<bool, 3> output_mask) {
  const char* op = "kiln::layer_norm_backward";
  layer_norm_sizes(op, x, weight, std::nullopt, 0.0);
  check_layer_norm_backward(op, grad, x, mean, rstd);
  const bool has_w = weight && weight->defined();
  const auto c = x.size(-1);
  return {output_mask[0] ? at::empty(x.sizes(), x.options()) : at::Tensor(),
          output_mask[1] && has_w ? at::empty({c}, x.options()) : at::Tensor(),
          output_mask[2] ? at::empty({c}, x.options()) : at::Tensor()};
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("layer_norm_forward", layer_norm_forward_meta);
  m.impl("layer_norm_backward", layer_norm_backward_meta);
}

}  // namespace kiln::ops
