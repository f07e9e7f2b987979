// CPU kernels of kiln::causal_attention_forward and kiln::causal_attention_backward:
// the checks, contiguous operands and outputs around the vectorised kernels. bfloat16's
// products use AVX512-BF16's dot products where the CPU has them, float32's FMAs
// (attention_cpu_kernel.cpp).
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "../cpu_bf16.h"
#include "attention_args.h"

namespace kiln::ops {
namespace {

std::tuple<at::Tensor, at::Tensor> causal_attention_forward_cpu(const at::Tensor& qkv, int64_t heads,
                                                                double dropout_p, int64_t seed) {
  const auto s = attention_shape("kiln::causal_attention_forward", qkv, heads);
  const auto drop = attention_dropout("kiln::causal_attention_forward", dropout_p, seed);
  const auto x = qkv.contiguous();
  auto out = at::empty({s.batch, s.time, s.heads * s.head_dim}, qkv.options());
  auto lse = at::empty({s.batch, s.heads, s.time}, qkv.options().dtype(at::kFloat));
  const auto kernel = cpu::causal_attention_forward_impl();
  const bool dot = cpu_has_avx512_bf16();
  if (out.numel() > 0)  // one head is ~0.1 MFLOP or more: a grain of one head
    at::parallel_for(0, s.batch * s.heads, 1, [&](int64_t begin, int64_t end) {
      kernel(s, drop, x.const_data_ptr(), out.data_ptr(), lse.data_ptr<float>(), dot, begin, end);
    });
  return {std::move(out), std::move(lse)};
}

at::Tensor causal_attention_backward_cpu(const at::Tensor& grad, const at::Tensor& qkv,
                                         const at::Tensor& out, const at::Tensor& lse, int64_t heads,
                                         double dropout_p, int64_t seed) {
  const char* op = "kiln::causal_attention_backward";
  const auto s = attention_shape(op, qkv, heads);
  const auto drop = attention_dropout(op, dropout_p, seed);
  check_attention_backward(op, s, qkv, grad, out, lse);
  const auto x = qkv.contiguous(), g = grad.contiguous(), y = out.contiguous(), l = lse.contiguous();
  auto dqkv = at::empty(x.sizes(), x.options());
  const auto kernel = cpu::causal_attention_backward_impl();
  const bool dot = cpu_has_avx512_bf16();
  if (dqkv.numel() > 0)
    at::parallel_for(0, s.batch * s.heads, 1, [&](int64_t begin, int64_t end) {
      kernel(s, drop, g.const_data_ptr(), x.const_data_ptr(), y.const_data_ptr(), l.const_data_ptr<float>(),
             dqkv.data_ptr(), dot, begin, end);
    });
  return dqkv;
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("causal_attention_forward", causal_attention_forward_cpu);
  m.impl("causal_attention_backward", causal_attention_backward_cpu);
}

}  // namespace kiln::ops
