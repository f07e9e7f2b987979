// The checks and preparation that the CPU and CUDA bias_gelu kernels share.
#pragma once
#include "../op_support.h"

namespace kiln::ops {

struct BiasGeluArgs {
  at::Tensor x, b;  // contiguous; x viewed as (rows, n)
  int64_t rows, n;
};

/// x: (…, N) floating; b: (N), the dtype and device of x.
inline BiasGeluArgs bias_gelu_args(std::string_view op, const at::Tensor& x, const at::Tensor& b) {
  check_floating(op, "x", x);
  TORCH_CHECK(x.dim() >= 1, op, ": x: expected a tensor of shape (…, N), got a scalar");
  TORCH_CHECK(b.defined(), op, ": b: expected a tensor, got an undefined one");
  TORCH_CHECK(b.dim() == 1 && b.size(0) == x.size(-1), op, ": b: expected shape [", x.size(-1),
              "] (the last dimension of x), got ", b.sizes());
  TORCH_CHECK(b.scalar_type() == x.scalar_type(), op, ": b: expected dtype ", x.scalar_type(),
              " (the dtype of x), got ", b.scalar_type());
  TORCH_CHECK(b.device() == x.device(), op, ": b: expected device ", x.device(),
              " (the device of x), got ", b.device());
  const int64_t n = x.size(-1);
  return {x.contiguous(), b.contiguous(), n ? x.numel() / n : 0, n};
}

struct BiasGeluBackwardArgs {
  BiasGeluArgs in;
  at::Tensor grad;          // contiguous, like x
  at::Tensor dx;            // allocated, like x
  at::ScalarType acc_type;  // db sums: float, or double for float64
};

/// The checks of bias_gelu plus grad (the shape, dtype and device of x).
inline BiasGeluBackwardArgs bias_gelu_backward_args(const at::Tensor& grad, const at::Tensor& x,
                                                    const at::Tensor& b) {
  auto in = bias_gelu_args("kiln::bias_gelu_backward", x, b);
  check_like("kiln::bias_gelu_backward", "x", x, "grad", grad);
  auto dx = output_like(in.x);
  const auto acc_type = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  return {std::move(in), grad.contiguous(), std::move(dx), acc_type};
}

}  // namespace kiln::ops
