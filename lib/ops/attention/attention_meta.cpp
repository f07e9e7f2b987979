// Meta kernels of kiln::causal_attention_forward and kiln::causal_attention_backward:
// the CPU kernels' checks and output shapes without the arithmetic.
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "attention_args.h"

namespace kiln::ops {
namespace {

std::tuple<at::Tensor, at::Tensor> causal_attention_forward_meta(const at::Tensor& qkv, int64_t heads,
                                                                 double dropout_p, int64_t seed) {
  const auto s = attention_shape("kiln::causal_attention_forward", qkv, heads);
  attention_dropout("kiln::causal_attention_forward", dropout_p, seed);
  return {at::empty({s.batch, s.time, s.heads * s.head_dim}, qkv.options()),
          at::empty({s.batch, s.heads, s.time}, qkv.options().dtype(at::kFloat))};
}

at::Tensor causal_attention_backward_meta(const at::Tensor& grad, const at::Tensor& qkv,
                                          const at::Tensor& out, const at::Tensor& lse, int64_t heads,
                                          double dropout_p, int64_t seed) {
  const char* op = "kiln::causal_attention_backward";
  const auto s = attention_shape(op, qkv, heads);
  attention_dropout(op, dropout_p, seed);
  check_attention_backward(op, s, qkv, grad, out, lse);
  return at::empty(qkv.sizes(), qkv.options());
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("causal_attention_forward", causal_attention_forward_meta);
  m.impl("causal_attention_backward", causal_attention_backward_meta);
}

}  // namespace kiln::ops
