// Meta kernels of kiln::batch_norm_forward and kiln::batch_norm_backward: the CPU
// kernels' checks and outputs' shapes without the arithmetic (the running statistics
// are left as they are).
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include "batch_norm_args.h"

namespace kiln::ops {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_forward_meta(
    const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, at::Tensor& running_mean,
    at::Tensor& running_var, bool /*training*/, double momentum, double eps, bool /*relu*/) {
  check_batch_norm("kiln::batch_norm_forward", x, weight, bias, running_mean, running_var, momentum, eps);
  const auto c = x.options().dtype(at::kFloat);
  return {at::empty_like(x, x.options(), batch_norm_format(x)), at::empty({x.size(1)}, c), at::empty({x.size(1)}, c)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward_meta(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
    const at::Tensor& mean, const at::Tensor& invstd, bool /*training*/, bool /*relu*/,
    std::array<bool, 3> output_mask) {
  check_batch_norm("kiln::batch_norm_backward", x, weight, bias, mean, invstd, 0.0, 0.0, {"mean", "invstd"});
  TORCH_CHECK(grad.defined() && grad.sizes() == x.sizes(), "kiln::batch_norm_backward: grad: expected shape ",
              x.sizes(), " (x's), got ", grad.defined() ? grad.sizes() : at::IntArrayRef{});
  return {output_mask[0] ? at::empty_like(x, x.options(), batch_norm_format(x)) : at::Tensor(),
          output_mask[1] ? at::empty({x.size(1)}, weight.options()) : at::Tensor(),
          output_mask[2] ? at::empty({x.size(1)}, bias.options()) : at::Tensor()};
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("batch_norm_forward", batch_norm_forward_meta);
  m.impl("batch_norm_backward", batch_norm_backward_meta);
}

}  // namespace kiln::ops
