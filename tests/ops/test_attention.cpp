// kiln::causal_attention: output, log-sum-exp and gradients against a float32
// reference (ATen's own ops on the same bfloat16 values, autograd for the gradients;
// for float32 inputs, to float32's rounding) for every CPU capability build, with and without AVX512-BF16's dot products where the
// CPU has them; odd lengths and head sizes (padding), autograd through the op, autocast,
// meta shapes, and bad input.
#include <ATen/autocast_mode.h>
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <string>

#include "cpu_builds.h"
#include "ops/attention/attention_kernel.h"
#include "ops/cpu_bf16.h"
#include "ops/dropout/dropout_args.h"
#include "ops/ops.h"
#include "support.h"

namespace {

using Catch::Matchers::Contains;

struct Shape {
  int64_t b, t, heads, d;
};
// T around the 32-query block (1, 31, 33, 45, 70) and d off the 16-column padding (2, 8,
// 24) and past 32 columns (40: a whole 32-column copy and rounding, then a tail).
const std::vector<Shape> kShapes = {{1, 1, 1, 2}, {2, 31, 3, 8}, {1, 33, 2, 32}, {2, 70, 1, 24},
                                    {1, 64, 2, 16}, {1, 45, 2, 40}};

// The reference in float32: (out, lse) of qkv (B, T, 3C) as float; with `drop` (the
// (B·heads, T, T) multipliers kiln::dropout gives: 0 or 1/(1 − p)) the weights times it.
std::pair<at::Tensor, at::Tensor> reference(const at::Tensor& qkv, int64_t heads, const at::Tensor& drop = {}) {
  const int64_t b = qkv.size(0), t = qkv.size(1), c = qkv.size(2) / 3, d = c / heads;
  const auto parts = qkv.view({b, t, 3, heads, d}).permute({2, 0, 3, 1, 4}).unbind(0);
  const auto scores = at::matmul(parts[0], parts[1].transpose(-1, -2)) / std::sqrt(static_cast<double>(d));
  const auto mask = at::ones({t, t}, at::kBool).triu(1);
  const auto masked = scores.masked_fill(mask, -INFINITY);
  const auto lse = at::logsumexp(masked, -1);  // (B, heads, T)
  auto weights = at::softmax(masked, -1);
  if (drop.defined()) weights = weights * drop.view({b, heads, t, t});
  const auto out = at::matmul(weights, parts[2]).transpose(1, 2).reshape({b, t, c});
  return {out, lse};
}

// The kernels' dropout for p and seed, and the weights' multipliers kiln::dropout gives.
std::pair<kiln::ops::cpu::AttentionDropout, at::Tensor> dropout_of(double p, int64_t seed, int64_t bh, int64_t t) {
  kiln::ops::cpu::AttentionDropout d;
  if (p == 0.0) return {d, at::Tensor()};
  const auto k = kiln::ops::dropout_constants("test", p);
  d.active = true;
  d.seed = static_cast<uint64_t>(seed);
  d.keep_below = k.keep_below;
  d.scale = static_cast<float>(k.scale);
  return {d, kiln::ops::dropout(at::ones({bh, t, t}), p, seed)};
}

at::Tensor sample_qkv(const Shape& s, int64_t seed) {
  at::manual_seed(seed);
  return at::randn({s.b, s.t, 3 * s.heads * s.d}).to(at::kBFloat16);
}

// Largest |a − e| over the largest |e|: bfloat16's rounding of P, dS and the outputs
// keeps this near 2^-8; a wrong index or mask puts it near 1.
double relative_error(const at::Tensor& actual, const at::Tensor& expected) {
  const double scale = expected.abs().max().item<double>();
  return (actual.to(at::kFloat) - expected).abs().max().item<double>() / std::max(scale, 1e-30);
}

std::vector<bool> dot_modes() {
  std::vector<bool> modes = {false};
  if (kiln::ops::cpu_has_avx512_bf16()) modes.push_back(true);
  return modes;
}

}  // namespace

TEST_CASE("causal attention matches a float32 reference in every CPU build, with and without dropout",
          "[ops][attention]") {
  for (const auto& s : kShapes) {
   for (const double p : {0.0, 0.3}) {
    const auto qkv = sample_qkv(s, s.t);
    const auto [drop, mults] = dropout_of(p, 1000 + s.t, s.b * s.heads, s.t);
    const auto [ref_out, ref_lse] = reference(qkv.to(at::kFloat), s.heads, mults);
    // The gradient reference: autograd through the float32 reference.
    auto qkv32 = qkv.to(at::kFloat).requires_grad_(true);
    const auto grad = at::randn(ref_out.sizes()).to(at::kBFloat16);
    reference(qkv32, s.heads, mults).first.backward(grad.to(at::kFloat));
    const kiln::ops::cpu::AttentionShape shape{s.b, s.t, s.heads, s.d};
    for (const auto& [name, fwd] : KILN_CPU_BUILDS(causal_attention_forward)) {
      for (const bool bf16_dot : dot_modes()) {
        if (bf16_dot && name != "avx512") continue;  // vdpbf16ps is only in the AVX-512 build
        INFO("build " << name << ", bf16 dot " << bf16_dot << ", B " << s.b << " T " << s.t
                      << " heads " << s.heads << " d " << s.d << ", dropout " << p);
        auto out = at::empty(ref_out.sizes(), qkv.options());
        auto lse = at::empty(ref_lse.sizes(), qkv.options().dtype(at::kFloat));
        fwd(shape, drop, qkv.const_data_ptr(), out.data_ptr(), lse.data_ptr<float>(), bf16_dot, 0, s.b * s.heads);
        CHECK(relative_error(out, ref_out) < 0.02);
        KILN_REQUIRE_CLOSE(lse, ref_lse, 1e-5, 1e-5);
        auto dqkv = at::full(qkv.sizes(), NAN, qkv.options());  // every element must be written
        const auto ref = out;  // the kernel's own output, as autograd saves it
        for (const auto& [bname, bwd] : KILN_CPU_BUILDS(causal_attention_backward)) {
          if (bname != name) continue;
          bwd(shape, drop, grad.const_data_ptr(), qkv.const_data_ptr(), ref.const_data_ptr(),
              lse.const_data_ptr<float>(), dqkv.data_ptr(), bf16_dot, 0, s.b * s.heads);
        }
        REQUIRE(!at::isnan(dqkv).any().item<bool>());
        CHECK(relative_error(dqkv, qkv32.grad()) < 0.03);
      }
    }
   }
  }
}

TEST_CASE("causal attention in float32 matches the float32 reference in every CPU build, with and without dropout",
          "[ops][attention]") {
  for (const auto& s : kShapes) {
    for (const double p : {0.0, 0.3}) {
      const auto qkv = sample_qkv(s, s.t).to(at::kFloat);
      const auto [drop, mults] = dropout_of(p, 1000 + s.t, s.b * s.heads, s.t);
      const auto [ref_out, ref_lse] = reference(qkv, s.heads, mults);
      auto qkv_ref = qkv.clone().requires_grad_(true);
      const auto grad = at::randn(ref_out.sizes());
      reference(qkv_ref, s.heads, mults).first.backward(grad);
      kiln::ops::cpu::AttentionShape shape{s.b, s.t, s.heads, s.d};
      shape.float32 = true;
      for (const auto& [name, fwd] : KILN_CPU_BUILDS(causal_attention_forward)) {
        INFO("build " << name << ", B " << s.b << " T " << s.t << " heads " << s.heads << " d " << s.d
                      << ", dropout " << p);
        auto out = at::full(ref_out.sizes(), NAN);  // every element must be written
        auto lse = at::empty(ref_lse.sizes());
        fwd(shape, drop, qkv.const_data_ptr(), out.data_ptr(), lse.data_ptr<float>(), false, 0, s.b * s.heads);
        // float32 throughout: only the order of the sums differs from the reference.
        CHECK(relative_error(out, ref_out) < 1e-5);
        KILN_REQUIRE_CLOSE(lse, ref_lse, 1e-5, 1e-5);
        auto dqkv = at::full(qkv.sizes(), NAN);
        for (const auto& [bname, bwd] : KILN_CPU_BUILDS(causal_attention_backward)) {
          if (bname != name) continue;
          bwd(shape, drop, grad.const_data_ptr(), qkv.const_data_ptr(), out.const_data_ptr(),
              lse.const_data_ptr<float>(), dqkv.data_ptr(), false, 0, s.b * s.heads);
        }
        REQUIRE(!at::isnan(dqkv).any().item<bool>());
        CHECK(relative_error(dqkv, qkv_ref.grad()) < 1e-5);
      }
    }
  }
}

TEST_CASE("causal attention: the AVX512-BF16 products agree with the plain ones", "[ops][attention]") {
  if (!kiln::ops::cpu_has_avx512_bf16()) {
    kiln::test::skip("this CPU has no AVX512-BF16");
    return;
  }
#if defined(KILN_HAVE_CPU_AVX512)
  const Shape s{2, 97, 3, 32};
  const auto qkv = sample_qkv(s, 7);
  const kiln::ops::cpu::AttentionShape shape{s.b, s.t, s.heads, s.d};
  const int64_t c = s.heads * s.d;
  at::Tensor outs[2], grads[2];
  const auto grad = at::randn({s.b, s.t, c}).to(at::kBFloat16);
  for (int mode = 0; mode < 2; ++mode) {
    outs[mode] = at::empty({s.b, s.t, c}, qkv.options());
    auto lse = at::empty({s.b, s.heads, s.t}, qkv.options().dtype(at::kFloat));
    kiln::ops::cpu::avx512::causal_attention_forward(shape, {}, qkv.const_data_ptr(), outs[mode].data_ptr(),
                                                     lse.data_ptr<float>(), mode == 1, 0, s.b * s.heads);
    grads[mode] = at::empty_like(qkv);
    kiln::ops::cpu::avx512::causal_attention_backward(shape, {}, grad.const_data_ptr(), qkv.const_data_ptr(),
                                                      outs[0].const_data_ptr(), lse.const_data_ptr<float>(),
                                                      grads[mode].data_ptr(), mode == 1, 0, s.b * s.heads);
  }
  // The same products summed in another order: equal but for float32 rounding, which
  // a bfloat16 output may carry across one rounding step.
  CHECK(relative_error(outs[1], outs[0].to(at::kFloat)) < 0.01);
  CHECK(relative_error(grads[1], grads[0].to(at::kFloat)) < 0.01);
#endif
}

TEST_CASE("causal attention: a NaN in q or k reaches every row that sees it", "[ops][attention]") {
  const Shape s{1, 40, 1, 32};
  for (const bool float32 : {false, true}) {
    auto qkv = sample_qkv(s, 3);
    if (float32) qkv = qkv.to(at::kFloat);
    qkv.index_put_({0, 5, 3}, NAN);        // q of query 5
    qkv.index_put_({0, 9, s.d + 2}, NAN);  // k of key 9: queries 9 and after see it
    kiln::ops::cpu::AttentionShape shape{s.b, s.t, s.heads, s.d};
    shape.float32 = float32;
    for (const auto& [name, fwd] : KILN_CPU_BUILDS(causal_attention_forward)) {
      for (const bool bf16_dot : dot_modes()) {
        if (bf16_dot && (name != "avx512" || float32)) continue;
        INFO("build " << name << ", bf16 dot " << bf16_dot << ", float32 " << float32);
        auto out = at::empty({s.b, s.t, s.d}, qkv.options());
        auto lse = at::empty({s.b, s.heads, s.t}, qkv.options().dtype(at::kFloat));
        fwd(shape, {}, qkv.const_data_ptr(), out.data_ptr(), lse.data_ptr<float>(), bf16_dot, 0, 1);
        const auto row_nan = at::isnan(out[0].to(at::kFloat)).any(-1);
        for (int64_t i = 0; i < s.t; ++i) {
          INFO("query " << i);
          const bool sees_nan = i == 5 || i >= 9;
          CHECK(row_nan[i].item<bool>() == sees_nan);
          CHECK(std::isnan(lse[0][0][i].item<float>()) == sees_nan);
        }
      }
    }
  }
}

TEST_CASE("causal attention through autograd and autocast", "[ops][attention]") {
  const Shape s{2, 45, 2, 16};
  const auto base = sample_qkv(s, 3);
  auto qkv = base.clone().requires_grad_(true);
  const auto y = kiln::ops::causal_attention(qkv, s.heads);
  REQUIRE(y.sizes() == at::IntArrayRef({s.b, s.t, s.heads * s.d}));
  REQUIRE(y.scalar_type() == at::kBFloat16);
  const auto grad = at::randn(y.sizes()).to(at::kBFloat16);
  y.backward(grad);
  auto qkv32 = base.to(at::kFloat).requires_grad_(true);
  reference(qkv32, s.heads).first.backward(grad.to(at::kFloat));
  CHECK(relative_error(qkv.grad(), qkv32.grad()) < 0.03);

  // Without grad: the same output, no graph.
  {
    at::NoGradGuard no_grad;
    const auto y2 = kiln::ops::causal_attention(qkv, s.heads);
    CHECK(!y2.requires_grad());
    CHECK(at::equal(y2, y.detach()));
  }
  // Under CPU autocast a float32 qkv is cast to bfloat16 and the gradient comes back in float32.
  auto f32 = base.to(at::kFloat).requires_grad_(true);
  {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    const auto y3 = kiln::ops::causal_attention(f32, s.heads);
    at::autocast::set_autocast_enabled(at::kCPU, false);
    at::autocast::clear_cache();
    CHECK(y3.scalar_type() == at::kBFloat16);
    CHECK(at::equal(y3, y.detach()));
    y3.backward(grad);
  }
  REQUIRE(f32.grad().scalar_type() == at::kFloat);
  CHECK(at::equal(f32.grad(), qkv.grad().to(at::kFloat)));
}

TEST_CASE("causal attention in float32 through autograd", "[ops][attention]") {
  const Shape s{2, 45, 2, 16};
  const auto base = sample_qkv(s, 5).to(at::kFloat);
  for (const double p : {0.0, 0.2}) {
    INFO("dropout " << p);
    auto qkv = base.clone().requires_grad_(true);
    const auto y = kiln::ops::causal_attention(qkv, s.heads, p, 9);
    REQUIRE(y.scalar_type() == at::kFloat);
    const auto grad = at::randn(y.sizes());
    y.backward(grad);
    const auto mults = p > 0.0 ? kiln::ops::dropout(at::ones({s.b * s.heads, s.t, s.t}), p, 9) : at::Tensor();
    auto ref = base.clone().requires_grad_(true);
    const auto y_ref = reference(ref, s.heads, mults).first;
    y_ref.backward(grad);
    CHECK(relative_error(y, y_ref.detach()) < 1e-5);
    REQUIRE(qkv.grad().scalar_type() == at::kFloat);
    CHECK(relative_error(qkv.grad(), ref.grad()) < 1e-5);
  }
}

TEST_CASE("causal attention with dropout drops the weights kiln::dropout drops, backward too",
          "[ops][attention][dropout]") {
  const Shape s{2, 70, 3, 16};
  const auto base = sample_qkv(s, 4);
  for (const double p : {0.1, 0.5}) {
    INFO("p " << p);
    auto qkv = base.clone().requires_grad_(true);
    const auto y = kiln::ops::causal_attention(qkv, s.heads, p, 77);
    const auto grad = at::randn(y.sizes()).to(at::kBFloat16);
    y.backward(grad);
    const auto mults = kiln::ops::dropout(at::ones({s.b * s.heads, s.t, s.t}), p, 77);
    auto qkv32 = base.to(at::kFloat).requires_grad_(true);
    const auto ref = reference(qkv32, s.heads, mults).first;
    ref.backward(grad.to(at::kFloat));
    CHECK(relative_error(y, ref.detach()) < 0.02);
    CHECK(relative_error(qkv.grad(), qkv32.grad()) < 0.03);
    // Another seed drops others: the output moves by far more than rounding.
    CHECK(relative_error(kiln::ops::causal_attention(base, s.heads, p, 78), ref.detach()) > 0.05);
  }
  // p = 0 is no dropout, whatever the seed; p outside [0, 1] is refused.
  CHECK(at::equal(kiln::ops::causal_attention(base, s.heads, 0.0, 5), kiln::ops::causal_attention(base, s.heads)));
  REQUIRE_THROWS_WITH(kiln::ops::causal_attention(base, s.heads, 1.5, 1),
                      Contains("kiln::causal_attention_forward: p: expected a probability in [0, 1], got 1.5"));
}

TEST_CASE("causal attention refuses a double backward", "[ops][attention]") {
  auto qkv = sample_qkv({1, 8, 1, 4}, 1).requires_grad_(true);
  const auto y = kiln::ops::causal_attention(qkv, 1);
  REQUIRE_THROWS_WITH(torch::autograd::grad({y.sum()}, {qkv}, {}, true, true),
                      Contains("not differentiable"));
}

TEST_CASE("causal attention's meta kernels give the shapes", "[ops][attention]") {
  const auto qkv = at::empty({3, 17, 3 * 4 * 8}, at::TensorOptions().device(at::kMeta).dtype(at::kBFloat16));
  const auto [out, lse] = kiln::ops::causal_attention_forward(qkv, 4);
  CHECK(out.sizes() == at::IntArrayRef({3, 17, 32}));
  CHECK(lse.sizes() == at::IntArrayRef({3, 4, 17}));
  CHECK(lse.scalar_type() == at::kFloat);
  const auto dqkv = kiln::ops::causal_attention_backward(out, qkv, out, lse, 4);
  CHECK(dqkv.sizes() == qkv.sizes());
}

TEST_CASE("causal attention names what is wrong with its input", "[ops][attention]") {
  const auto bf = at::TensorOptions().dtype(at::kBFloat16);
  CHECK_THROWS_WITH(kiln::ops::causal_attention(at::zeros({2, 4, 12}, at::kDouble), 2),
                    Contains("qkv: expected dtype BFloat16 or Float, got Double"));
  CHECK_THROWS_WITH(kiln::ops::causal_attention(at::zeros({2, 4, 14}, bf), 2),
                    Contains("expected a last dimension 3·heads·d (heads = 2), got 14"));
  CHECK_THROWS_WITH(kiln::ops::causal_attention(at::zeros({4, 12}, bf), 2),
                    Contains("expected a 3-D tensor (B, T, 3C)"));
  CHECK_THROWS_WITH(kiln::ops::causal_attention(at::zeros({2, 4, 12}, bf), 0),
                    Contains("heads: expected > 0, got 0"));
  const auto qkv = at::zeros({2, 4, 12}, bf);
  const auto [out, lse] = kiln::ops::causal_attention_forward(qkv, 2);
  CHECK_THROWS_WITH(kiln::ops::causal_attention_backward(out.narrow(1, 0, 3), qkv, out, lse, 2),
                    Contains("grad: expected shape [2, 4, 4] (B, T, C), got [2, 3, 4]"));
  CHECK_THROWS_WITH(kiln::ops::causal_attention_backward(out, qkv, out, lse.to(at::kDouble), 2),
                    Contains("lse: expected dtype Float"));
  CHECK_THROWS_WITH(kiln::ops::causal_attention_backward(out.to(at::kFloat), qkv, out, lse, 2),
                    Contains("grad: expected dtype BFloat16 (qkv's), got Float"));
  // An empty batch is no error.
  CHECK(kiln::ops::causal_attention(at::zeros({0, 4, 12}, bf), 2).sizes() == at::IntArrayRef({0, 4, 4}));
}
