// kiln::layer_norm: forward against ATen's layer norm for every dtype and every CPU
// build, the float32 → bfloat16/float16 output against ATen's then rounded, the
// gradients against ATen's (and central differences in float64), a half-type grad,
// autograd's output masks, meta shapes, bad input, CUDA against CPU.
#include <ATen/ops/native_layer_norm.h>
#include <torch/torch.h>

#include <limits>

#include "cpu_builds.h"
#include "ops/layer_norm/layer_norm_kernel.h"
#include "ops/ops.h"
#include "support.h"

using kiln::test::kFloatingDtypes;
using kiln::test::tolerance_for;

namespace {

// Widths around the vector widths, the GPT's 192, and one long row.
const std::vector<int64_t> kWidths = {1, 7, 16, 33, 192, 1000};

struct Params {
  at::Tensor w, b;
};
Params params(int64_t c, at::ScalarType dtype) {
  return {(at::rand({c}) + 0.5).to(dtype), at::randn({c}).to(dtype)};
}

}  // namespace

TEST_CASE("layer_norm matches ATen's for every dtype, with and without weight and bias",
          "[ops][layer_norm]") {
  for (const auto dtype : kFloatingDtypes) {
    const auto tol = tolerance_for(dtype);
    for (const int64_t c : kWidths) {
      for (const bool affine : {true, false}) {
        INFO("dtype " << dtype << ", width " << c << ", affine " << affine);
        // Rows far from zero: a one-pass variance would lose its digits here.
        const auto x = (at::randn({5, 13, c}) * 3 + 100).to(dtype);
        const auto [w, b] = params(c, dtype);
        const auto wo = affine ? std::optional(w) : std::nullopt, bo = affine ? std::optional(b) : std::nullopt;
        const auto [y, mean, rstd] = kiln::ops::layer_norm_forward(x, wo, bo, 1e-5);
        const auto xd = x.to(at::kDouble);
        const auto [ry, rmean, rrstd] = at::native_layer_norm(
            xd, {c}, affine ? std::optional(w.to(at::kDouble)) : std::nullopt,
            affine ? std::optional(b.to(at::kDouble)) : std::nullopt, 1e-5);
        REQUIRE(y.scalar_type() == dtype);
        REQUIRE(mean.sizes() == at::IntArrayRef({5, 13}));
        // x − mean at |x| ≈ 100 is off by about an ulp of 100 in float (7.6e-6), times
        // rstd: the float32 tolerance grows by two machine epsilons of the inputs'
        // scale times the largest rstd (ATen's own float32 layer norm reached 1.8x the
        // bare 1e-5 on such rows, kiln 1.2x, over 400 draws).
        const double input_rounding = dtype == at::kFloat ? 2 * std::numeric_limits<float>::epsilon() *
                                                                xd.abs().max().item<double>() *
                                                                rrstd.max().item<double>()
                                                          : 0.0;
        KILN_REQUIRE_CLOSE(y, ry, tol.rtol, tol.atol + input_rounding);
        KILN_REQUIRE_CLOSE(mean, rmean.squeeze(-1), 1e-6, 1e-6);
        // rstd up to 1/√eps for constant rows: relative.
        KILN_REQUIRE_CLOSE(rstd, rrstd.squeeze(-1), dtype == at::kDouble ? 1e-10 : 1e-4, 0);
      }
    }
  }
}

TEST_CASE("layer_norm writes a float32 input's output rounded once into a half type",
          "[ops][layer_norm]") {
  for (const auto low : {at::kBFloat16, at::kHalf}) {
    for (const int64_t c : kWidths) {
      INFO("out_dtype " << low << ", width " << c);
      const auto x = at::randn({64, c}) * 2 + 1;
      const auto [w, b] = params(c, at::kFloat);
      const auto y = kiln::ops::layer_norm(x, w, b, 1e-5, low);
      REQUIRE(y.scalar_type() == low);
      // ATen's float32 result rounded: equal but where the two float32 results straddle
      // a rounding boundary (one unit of the half type apart, rarely).
      const auto ref = at::layer_norm(x, {c}, w, b, 1e-5).to(low);
      const auto differ = (y != ref).sum().item<int64_t>();
      REQUIRE(differ <= std::max<int64_t>(2, y.numel() / 200));
      const auto tol = tolerance_for(low);
      KILN_REQUIRE_CLOSE(y, ref, tol.rtol, tol.atol);
    }
  }
}

TEST_CASE("layer_norm's forward agrees in every CPU build", "[ops][layer_norm]") {
  const int64_t rows = 9, c = 70;
  const auto x = at::randn({rows, c}), w = at::randn({c}), b = at::randn({c});
  const auto ref = at::layer_norm(x, {c}, w, b, 1e-5);
  for (const auto& [name, fn] : KILN_CPU_BUILDS(layer_norm_forward)) {
    for (const auto out : {at::kFloat, at::kBFloat16}) {
      INFO("build " << name << ", out " << out);
      auto y = at::empty({rows, c}, out), mean = at::empty({rows}), rstd = at::empty({rows});
      fn(kiln::ops::DType::kFloat, out == at::kFloat ? kiln::ops::DType::kFloat : kiln::ops::DType::kBFloat16,
         x.const_data_ptr(), w.const_data_ptr(), b.const_data_ptr(), y.data_ptr(), mean.data_ptr(),
         rstd.data_ptr(), c, 1e-5, 0, rows);
      const auto tol = tolerance_for(out);
      KILN_REQUIRE_CLOSE(y, ref.to(out), tol.rtol, tol.atol);
    }
  }
}

TEST_CASE("layer_norm's gradients match ATen's and central differences", "[ops][layer_norm]") {
  for (const auto dtype : {at::kFloat, at::kDouble, at::kBFloat16}) {
    for (const int64_t c : kWidths) {
      INFO("dtype " << dtype << ", width " << c);
      const auto x0 = (at::randn({6, 11, c}) * 2 + 3).to(dtype);
      const auto [w0, b0] = params(c, dtype);
      const auto g = at::randn({6, 11, c}).to(dtype);
      const auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true),
                 b = b0.clone().requires_grad_(true);
      kiln::ops::layer_norm(x, w, b, 1e-5).backward(g);
      const auto xr = x0.to(at::kDouble).requires_grad_(true), wr = w0.to(at::kDouble).requires_grad_(true),
                 br = b0.to(at::kDouble).requires_grad_(true);
      at::layer_norm(xr, {c}, wr, br, 1e-5).backward(g.to(at::kDouble));
      const auto tol = tolerance_for(dtype);
      // Sums over rows (dw, db) and over a row (dx) grow the error with the count.
      const double scale = dtype == at::kDouble ? 1.0 : 4.0;
      REQUIRE(x.grad().scalar_type() == dtype);
      KILN_REQUIRE_CLOSE(x.grad(), xr.grad(), tol.rtol * scale, tol.atol * scale);
      KILN_REQUIRE_CLOSE(w.grad(), wr.grad(), tol.rtol * scale, tol.atol * scale * 10);
      KILN_REQUIRE_CLOSE(b.grad(), br.grad(), tol.rtol * scale, tol.atol * scale * 10);
    }
  }
  const auto w = at::rand({5}, at::kDouble) + 0.5, b = at::randn({5}, at::kDouble);
  const auto x = at::randn({4, 5}, at::kDouble) * 2;
  const auto close = kiln::test::gradcheck([&](const at::Tensor& t) { return kiln::ops::layer_norm(t, w, b, 1e-5); }, x);
  INFO(close.report);
  REQUIRE(close.ok);
}

// The weight and bias gradients are summed per thread, then over threads: with one
// thread, with more threads than tasks and with several tasks per thread, every dtype
// gives ATen's sums (float64 exactly up to rounding order).
TEST_CASE("layer_norm's weight and bias gradients are the same for any thread count",
          "[ops][layer_norm]") {
  const int before = at::get_num_threads();
  for (const auto dtype : {at::kFloat, at::kDouble, at::kBFloat16}) {
    const int64_t rows = 1000, c = 37;
    const auto x = at::randn({rows, c}).to(dtype), g = at::randn({rows, c}).to(dtype);
    const auto [w, b] = params(c, dtype);
    const auto [y, mean, rstd] = kiln::ops::layer_norm_forward(x, w, b, 1e-5);
    const auto xd = x.to(at::kDouble), gd = g.to(at::kDouble);
    const auto xhat = (xd - xd.mean(-1, true)) * (xd.var(-1, false, true) + 1e-5).rsqrt();
    const auto dw_ref = (gd * xhat).sum(0), db_ref = gd.sum(0);
    for (const int threads : {1, 2, 3, 8}) {
      INFO("dtype " << dtype << ", threads " << threads);
      at::set_num_threads(threads);
      const auto [dx, dw, db] = kiln::ops::layer_norm_backward(g, x, w, mean, rstd, {true, true, true});
      REQUIRE(dw.scalar_type() == dtype);
      REQUIRE(db.scalar_type() == dtype);
      const double tol = dtype == at::kDouble ? 1e-9 : dtype == at::kFloat ? 1e-3 : 0.3;
      KILN_REQUIRE_CLOSE(dw.to(at::kDouble), dw_ref, 1e-2, tol);
      KILN_REQUIRE_CLOSE(db.to(at::kDouble), db_ref, 1e-2, tol);
    }
  }
  at::set_num_threads(before);
}

// A row of one value normalises to 0 whatever it holds, so its input gradient is
// exactly 0: dx = rstd·(g·w − mean(g·w) − x̂·…) with g·w its own mean. With rstd near
// 1/√eps (316), the same product rounded once for the mean and taken exactly inside a
// fused multiply-subtract for dx left up to 6.6e-5 there.
TEST_CASE("layer_norm's input gradient is exactly zero for rows of one value", "[ops][layer_norm]") {
  for (const auto dtype : {at::kFloat, at::kDouble, at::kBFloat16}) {
    for (int64_t seed = 0; seed < 32; ++seed) {
      INFO("dtype " << dtype << ", seed " << seed);
      at::manual_seed(seed);
      const auto x = (at::randn({6, 11, 1}) * 2 + 3).to(dtype);
      const auto w = (at::rand({1}) + 0.5).to(dtype), b = at::randn({1}).to(dtype);
      const auto g = at::randn({6, 11, 1}).to(dtype);
      const auto [y, mean, rstd] = kiln::ops::layer_norm_forward(x, w, b, 1e-5);
      const auto [dx, dw, db] = kiln::ops::layer_norm_backward(g, x, w, mean, rstd, {true, true, true});
      REQUIRE(dx.abs().max().item<double>() == 0.0);
    }
  }
}

TEST_CASE("layer_norm takes a half-type grad for a float32 input and asks only for what is needed",
          "[ops][layer_norm]") {
  const int64_t c = 192;
  const auto x0 = at::randn({4, 32, c}), g = at::randn({4, 32, c}).to(at::kBFloat16);
  const auto [w0, b0] = params(c, at::kFloat);
  const auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true),
             b = b0.clone().requires_grad_(true);
  const auto y = kiln::ops::layer_norm(x, w, b, 1e-5, at::kBFloat16);
  y.backward(g);
  const auto xr = x0.clone().requires_grad_(true), wr = w0.clone().requires_grad_(true),
             br = b0.clone().requires_grad_(true);
  at::layer_norm(xr, {c}, wr, br, 1e-5).backward(g.to(at::kFloat));
  REQUIRE(x.grad().scalar_type() == at::kFloat);
  REQUIRE(w.grad().scalar_type() == at::kFloat);
  KILN_REQUIRE_CLOSE(x.grad(), xr.grad(), 1e-4, 1e-5);
  KILN_REQUIRE_CLOSE(w.grad(), wr.grad(), 1e-4, 1e-4);
  KILN_REQUIRE_CLOSE(b.grad(), br.grad(), 1e-4, 1e-4);
  // Only x needs a gradient: the op's backward is asked for dx alone.
  const auto [yy, mean, rstd] = kiln::ops::layer_norm_forward(x0, w0, b0, 1e-5);
  const auto [dx, dw, db] = kiln::ops::layer_norm_backward(g.to(at::kFloat), x0, w0, mean, rstd, {true, false, false});
  REQUIRE(dx.defined());
  REQUIRE_FALSE(dw.defined());
  REQUIRE_FALSE(db.defined());
  const auto xo = x0.clone().requires_grad_(true);
  kiln::ops::layer_norm(xo, w0, b0, 1e-5).backward(g.to(at::kFloat));
  KILN_REQUIRE_CLOSE(xo.grad(), dx, 1e-6, 1e-6);
  // No grad mode: the output alone, nothing recorded.
  at::NoGradGuard no_grad;
  REQUIRE_FALSE(kiln::ops::layer_norm(x, w, b, 1e-5).requires_grad());
}

TEST_CASE("layer_norm refuses a double backward", "[ops][layer_norm]") {
  const auto x = at::randn({3, 8}, at::kDouble).requires_grad_(true);
  const auto y = kiln::ops::layer_norm(x, std::nullopt, std::nullopt, 1e-5);
  REQUIRE_THROWS_WITH(torch::autograd::grad({(y * y).sum()}, {x}, {}, true, true),
                      Catch::Contains("kiln::layer_norm: its backward is not differentiable"));
  // A plain backward of the same graph is fine.
  REQUIRE(torch::autograd::grad({(y * y).sum()}, {x})[0].defined());
}

TEST_CASE("layer_norm's meta kernels give the shapes and dtypes", "[ops][layer_norm]") {
  const auto meta = at::TensorOptions().device(at::kMeta);
  const auto x = at::empty({2, 3, 8}, meta), w = at::empty({8}, meta);
  const auto [y, mean, rstd] = kiln::ops::layer_norm_forward(x, w, w, 1e-5, at::kBFloat16);
  REQUIRE(y.sizes() == x.sizes());
  REQUIRE(y.scalar_type() == at::kBFloat16);
  REQUIRE(mean.sizes() == at::IntArrayRef({2, 3}));
  REQUIRE(rstd.scalar_type() == at::kFloat);
  const auto [dx, dw, db] = kiln::ops::layer_norm_backward(y, x, w, mean, rstd, {true, true, true});
  REQUIRE(dx.sizes() == x.sizes());
  REQUIRE(dx.scalar_type() == at::kFloat);
  REQUIRE(dw.sizes() == at::IntArrayRef({8}));
}

TEST_CASE("layer_norm names what is wrong with its input", "[ops][layer_norm]") {
  const auto x = at::randn({4, 8});
  REQUIRE_THROWS_WITH(kiln::ops::layer_norm(x.to(at::kInt), std::nullopt, std::nullopt, 1e-5),
                      Catch::Contains("kiln::layer_norm_forward: x: expected a floating-point tensor"));
  REQUIRE_THROWS_WITH(kiln::ops::layer_norm(x, at::ones({7}), std::nullopt, 1e-5),
                      Catch::Contains("weight: expected shape [8] (x's last dimension), got [7]"));
  REQUIRE_THROWS_WITH(kiln::ops::layer_norm(x, at::ones({8}), at::ones({8}, at::kDouble), 1e-5),
                      Catch::Contains("bias: expected dtype Float (the dtype of x), got Double"));
  REQUIRE_THROWS_WITH(kiln::ops::layer_norm(x, std::nullopt, std::nullopt, -1.0),
                      Catch::Contains("eps: expected a finite value >= 0, got -1"));
  REQUIRE_THROWS_WITH(kiln::ops::layer_norm(x.to(at::kDouble), std::nullopt, std::nullopt, 1e-5, at::kBFloat16),
                      Catch::Contains("out_dtype: expected x's dtype (Double) or, for a Float x, Half or "
                                      "BFloat16, got BFloat16"));
  REQUIRE_THROWS_WITH(kiln::ops::layer_norm(at::empty({3, 0}), std::nullopt, std::nullopt, 1e-5),
                      Catch::Contains("x: expected at least one dimension, the last (normalised) one > 0"));
  const auto [y, mean, rstd] = kiln::ops::layer_norm_forward(x, std::nullopt, std::nullopt, 1e-5);
  REQUIRE_THROWS_WITH(kiln::ops::layer_norm_backward(y, x, std::nullopt, mean.unsqueeze(-1), rstd, {true, false, false}),
                      Catch::Contains("kiln::layer_norm_backward: mean: expected shape [4] and dtype Float"));
  REQUIRE_THROWS_WITH(kiln::ops::layer_norm_backward(y.to(at::kDouble), x, std::nullopt, mean, rstd, {true, false, false}),
                      Catch::Contains("kiln::layer_norm_backward: out_dtype: expected x's dtype (Float)"));
}

TEST_CASE("layer_norm on CUDA matches CPU", "[ops][layer_norm][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  const auto x = at::randn({33, 192}) * 2 + 1, w = at::rand({192}) + 0.5, b = at::randn({192});
  const auto g = at::randn({33, 192}).to(at::kBFloat16);
  kiln::test::require_cuda_matches_cpu(
      [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
        const auto [y, mean, rstd] = kiln::ops::layer_norm_forward(in[0], in[1], in[2], 1e-5, at::kBFloat16);
        const auto [dx, dw, db] = kiln::ops::layer_norm_backward(in[3], in[0], in[1], mean, rstd, {true, true, true});
        return {y, mean, rstd, dx, dw, db};
      },
      {x, w, b, g}, tolerance_for(at::kBFloat16));
}
