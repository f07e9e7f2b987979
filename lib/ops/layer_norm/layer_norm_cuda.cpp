// CUDA kernels of kiln::layer_norm_forward and kiln::layer_norm_backward: ATen's own
// CUDA layer norm (native_layer_norm and its backward) behind kiln's checks and
// signature, the output cast to out_dtype and a half-type grad widened first. The
// fused dtype change is the CPU kernel's; on CUDA it is two kernels.
#include <ATen/ops/empty.h>
#include <ATen/ops/native_layer_norm.h>
#include <ATen/ops/native_layer_norm_backward.h>
#include <torch/library.h>

#include "layer_norm_args.h"

namespace kiln::ops {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_forward_cuda(
    const at::Tensor& x, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    double eps, std::optional<at::ScalarType> out_dtype) {
  const char* op = "kiln::layer_norm_forward";
  const auto z = layer_norm_sizes(op, x, weight, bias, eps);
  const auto y_dtype = layer_norm_out_dtype(op, x, out_dtype);
  auto [y, mean, rstd] = at::native_layer_norm(x, {z.c}, weight, bias, eps);
  const auto rows = x.sizes().slice(0, x.dim() - 1);
  return {y.to(y_dtype), mean.reshape(rows).to(layer_norm_acc_dtype(x)),
          rstd.reshape(rows).to(layer_norm_acc_dtype(x))};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward_cuda(
    const at::Tensor& grad, const at::Tensor& x, const std::optional<at::Tensor>& weight,
    const at::Tensor& mean, const at::Tensor& rstd, std::array<bool, 3> output_mask) {
  const char* op = "kiln::layer_norm_backward";
  const auto z = layer_norm_sizes(op, x, weight, std::nullopt, 0.0);
  check_layer_norm_backward(op, grad, x, mean, rstd);
  auto keep = x.sizes().vec();
  keep.back() = 1;
  // ATen's backward computes the bias gradient only with a bias: a stand-in of the
  // right shape where db is asked for (its values are not read).
  const auto stand_in = output_mask[2] ? std::optional<at::Tensor>(at::empty({z.c}, x.options()))
                                       : std::optional<at::Tensor>();
  const bool has_w = weight && weight->defined();
  return at::native_layer_norm_backward(grad.to(x.scalar_type()), x, {z.c}, mean.reshape(keep),
                                        rstd.reshape(keep), weight, stand_in,
                                        {output_mask[0], output_mask[1] && has_w, output_mask[2]});
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("layer_norm_forward", layer_norm_forward_cuda);
  m.impl("layer_norm_backward", layer_norm_backward_cuda);
}

}  // namespace kiln::ops
