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

}  // namespace kiln::ops
