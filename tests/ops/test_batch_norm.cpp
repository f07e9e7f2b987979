// kiln::batch_norm against ATen's batch norm (and ATen's relu after it) in float64 on
// the same values: the output, the running statistics it updates, the saved mean and
// invstd, and the gradients of x, weight and bias, for channels-last and contiguous
// inputs of 2 to 5 dimensions, odd channel counts (past and short of a vector), with and
// without the ReLU, in training and evaluation, float32 and the half types; every CPU
// build's kernels; autograd, the meta kernels and bad input.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "cpu_builds.h"
#include "ops/batch_norm/batch_norm_kernel.h"
#include "ops/ops.h"
#include "support.h"

namespace {

using Catch::Matchers::Contains;

struct Case {
  std::vector<int64_t> shape;
  at::MemoryFormat format;
};
// C 1, 3, 17, 32 and 40 (a vector and a tail); a plane past one block (75·60 = 4500
// values); 2-D (rows of C), 3-D, 4-D both ways, 5-D channels last; 1×1 images.
const std::vector<Case> kCases = {
    {{64, 17}, at::MemoryFormat::Contiguous},          {{5, 3, 40}, at::MemoryFormat::Contiguous},
    {{4, 32, 7, 9}, at::MemoryFormat::Contiguous},     {{4, 32, 7, 9}, at::MemoryFormat::ChannelsLast},
    {{3, 40, 5, 5}, at::MemoryFormat::ChannelsLast},   {{2, 1, 75, 60}, at::MemoryFormat::Contiguous},
    {{2, 17, 3, 4, 5}, at::MemoryFormat::ChannelsLast3d}, {{9, 17, 1, 1}, at::MemoryFormat::Contiguous},
    {{600, 40, 1, 1}, at::MemoryFormat::ChannelsLast}};

struct Params {
  at::Tensor w, b, rm, rv;
};
Params params(int64_t c, int64_t seed) {
  at::manual_seed(seed);
  return {at::rand({c}) + 0.5, at::randn({c}), at::randn({c}) * 0.1, at::rand({c}) + 0.5};
}

// ATen's batch norm (and relu) in float64 on x's values: (y, running mean, running var,
// dx, dw, db) for the upstream gradient g.
std::vector<at::Tensor> reference(const at::Tensor& x, const Params& p, const at::Tensor& g, bool training,
                                  bool relu, double momentum, double eps) {
  auto x64 = x.to(at::kDouble).contiguous().requires_grad_(true);
  auto w = p.w.to(at::kDouble).requires_grad_(true), b = p.b.to(at::kDouble).requires_grad_(true);
  auto rm = p.rm.to(at::kDouble), rv = p.rv.to(at::kDouble);
  auto y = at::batch_norm(x64, w, b, rm, rv, training, momentum, eps, false);
  if (relu) y = at::relu(y);
  y.backward(g.to(at::kDouble));
  return {y.detach(), rm, rv, x64.grad(), w.grad(), b.grad()};
}

}  // namespace

TEST_CASE("batch_norm matches ATen's in float64, both layouts, training and evaluation, with and without relu",
          "[ops][batch_norm]") {
  for (const auto& k : kCases) {
    for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      for (const bool training : {true, false}) {
        for (const bool relu : {false, true}) {
          INFO("shape " << at::IntArrayRef(k.shape) << ", format " << k.format << ", " << dtype << ", training "
                        << training << ", relu " << relu);
          at::manual_seed(k.shape[1]);
          const auto x = (at::randn(k.shape) * 3 + 5).to(dtype).contiguous(k.format);  // a mean far from 0
          const auto g = at::randn(k.shape).to(dtype).contiguous(k.format);
          const auto p = params(k.shape[1], 7);
          const double momentum = 0.1, eps = 1e-5;
          const auto ref = reference(x, p, g, training, relu, momentum, eps);
          auto rm = p.rm.clone(), rv = p.rv.clone();
          auto xv = x.clone().requires_grad_(true);
          auto w = p.w.clone().requires_grad_(true), b = p.b.clone().requires_grad_(true);
          const auto y = kiln::ops::batch_norm(xv, w, b, rm, rv, training, momentum, eps, relu);
          REQUIRE(y.scalar_type() == dtype);
          REQUIRE(y.sizes() == x.sizes());
          CHECK(y.is_contiguous(k.format));
          y.backward(g);
          const auto tol = kiln::test::tolerance_for(dtype);
          // The half types: x's rounding moves the statistics, not only the output's.
          const double rtol = dtype == at::kFloat ? 1e-5 : tol.rtol, atol = dtype == at::kFloat ? 1e-5 : 2 * tol.atol;
          KILN_REQUIRE_CLOSE(y.to(at::kDouble), ref[0], rtol, atol);
          KILN_REQUIRE_CLOSE(rm.to(at::kDouble), ref[1], 1e-5, 1e-5);
          KILN_REQUIRE_CLOSE(rv.to(at::kDouble), ref[2], 1e-5, 1e-5);
          // Gradients: sums over the batch, rounded once (float32) or computed from a
          // half-type grad; the weight's over N·S products.
          KILN_REQUIRE_CLOSE(xv.grad().to(at::kDouble), ref[3], rtol * 4, atol * 4);
          KILN_REQUIRE_CLOSE(w.grad().to(at::kDouble), ref[4], 1e-4, 1e-4);
          KILN_REQUIRE_CLOSE(b.grad().to(at::kDouble), ref[5], 1e-4, 1e-4);
          CHECK(xv.grad().scalar_type() == dtype);
        }
      }
    }
  }
}

TEST_CASE("batch_norm: every CPU build's kernels give the op's results", "[ops][batch_norm]") {
  using kiln::ops::cpu::BatchNormLayout;
  for (const auto& k : kCases) {
    for (const auto dtype : {at::kFloat, at::kBFloat16}) {
      INFO("shape " << at::IntArrayRef(k.shape) << ", format " << k.format << ", " << dtype);
      at::manual_seed(3);
      const auto x = at::randn(k.shape).to(dtype).contiguous(k.format);
      const auto g = at::randn(k.shape).to(dtype).contiguous(k.format);
      const int64_t c = k.shape[1];
      BatchNormLayout l;
      l.c = c;
      l.s = x.numel() / (k.shape[0] * c);
      l.rows = k.format != at::MemoryFormat::Contiguous || l.s == 1;
      const int64_t runs = l.rows ? x.numel() / c : x.numel() / l.s;
      const auto kd = dtype == at::kFloat ? kiln::ops::DType::kFloat : kiln::ops::DType::kBFloat16;
      const std::vector<float> zero(c, 0.0f);
      std::vector<float> scale(c), shift(c), mean(c), ones(c, 1.0f);
      for (int64_t j = 0; j < c; ++j) scale[j] = 0.5f + j * 0.25f, shift[j] = 0.1f * j - 0.5f, mean[j] = 0.05f * j;
      // The reference: float64 of the same arithmetic.
      const auto shape_c = [&](const std::vector<float>& v) {
        std::vector<int64_t> s(k.shape.size(), 1);
        s[1] = c;
        return at::tensor(v, at::kDouble).view(s);
      };
      const auto x64 = x.to(at::kDouble), g64 = g.to(at::kDouble);
      const auto pre = x64 * shape_c(scale) + shape_c(shift);
      const auto dz = g64 * (pre > 0);
      std::vector<int64_t> dims;
      for (int64_t d = 0; d < static_cast<int64_t>(k.shape.size()); ++d)
        if (d != 1) dims.push_back(d);
      for (const auto& [name, stats] : KILN_CPU_BUILDS(batch_norm_stats)) {
        INFO("build " << name);
        std::vector<double> s(c, 0.0), q(c, 0.0);
        stats(kd, l, x.const_data_ptr(), zero.data(), s.data(), q.data(), 0, runs);
        KILN_REQUIRE_CLOSE(at::tensor(s, at::kDouble), x64.sum(dims), 1e-5, 1e-4);
        KILN_REQUIRE_CLOSE(at::tensor(q, at::kDouble), (x64 * x64).sum(dims), 1e-5, 1e-4);
      }
      for (const auto& [name, apply] : KILN_CPU_BUILDS(batch_norm_apply)) {
        INFO("build " << name);
        auto y = at::empty_like(x);
        apply(kd, l, x.const_data_ptr(), scale.data(), shift.data(), true, y.data_ptr(), 0, runs);
        const auto t = kiln::test::tolerance_for(dtype);
        KILN_REQUIRE_CLOSE(y.to(at::kDouble), pre.clamp_min(0), t.rtol, t.atol);
      }
      for (const auto& [name, sums] : KILN_CPU_BUILDS(batch_norm_grad_sums)) {
        INFO("build " << name);
        std::vector<double> s(c, 0.0), q(c, 0.0);
        sums(kd, l, g.const_data_ptr(), x.const_data_ptr(), scale.data(), shift.data(), mean.data(), true, s.data(),
             q.data(), 0, runs);
        KILN_REQUIRE_CLOSE(at::tensor(s, at::kDouble), dz.sum(dims), 1e-5, 1e-4);
        KILN_REQUIRE_CLOSE(at::tensor(q, at::kDouble), (dz * (x64 - shape_c(mean))).sum(dims), 1e-5, 1e-4);
      }
      for (const auto& [name, input] : KILN_CPU_BUILDS(batch_norm_grad_input)) {
        INFO("build " << name);
        auto dx = at::empty_like(x);
        input(kd, l, g.const_data_ptr(), x.const_data_ptr(), scale.data(), shift.data(), true, mean.data(),
              scale.data(), ones.data(), shift.data(), dx.data_ptr(), 0, runs);
        const auto t = kiln::test::tolerance_for(dtype);
        const auto expected = shape_c(scale) * dz + (x64 - shape_c(mean)) * shape_c(ones) + shape_c(shift);
        KILN_REQUIRE_CLOSE(dx.to(at::kDouble), expected, t.rtol, t.atol);
      }
    }
  }
}

TEST_CASE("batch_norm: autograd, no-grad evaluation and the meta kernels", "[ops][batch_norm]") {
  const auto x = at::randn({8, 5, 4, 4});
  auto p = params(5, 1);
  // Without grad: no graph, the same output.
  auto rm = p.rm.clone(), rv = p.rv.clone();
  const auto y = kiln::ops::batch_norm(x, p.w, p.b, rm, rv, false, 0.1, 1e-5, true);
  CHECK(!y.requires_grad());
  CHECK(at::equal(rm, p.rm));  // evaluation leaves the running statistics alone
  // A double backward is refused.
  auto xg = x.clone().requires_grad_(true);
  auto rm2 = p.rm.clone(), rv2 = p.rv.clone();
  const auto y2 = kiln::ops::batch_norm(xg, p.w, p.b, rm2, rv2, true, 0.1, 1e-5, false);
  REQUIRE_THROWS_WITH(torch::autograd::grad({y2.square().sum()}, {xg}, {}, true, true), Contains("not differentiable"));
  // Meta: the shapes, the layout, the statistics' dtype.
  const auto meta = at::TensorOptions().device(at::kMeta);
  auto mrm = at::empty({5}, meta), mrv = at::empty({5}, meta);
  const auto [my, mm, mi] = kiln::ops::batch_norm_forward(at::empty({8, 5, 4, 4}, meta).contiguous(at::MemoryFormat::ChannelsLast),
                                                          at::empty({5}, meta), at::empty({5}, meta), mrm, mrv, true,
                                                          0.1, 1e-5, true);
  CHECK(my.sizes() == at::IntArrayRef({8, 5, 4, 4}));
  CHECK(my.is_contiguous(at::MemoryFormat::ChannelsLast));
  CHECK(mm.sizes() == at::IntArrayRef({5}));
  CHECK(mi.scalar_type() == at::kFloat);
}

TEST_CASE("batch_norm names what is wrong with its input", "[ops][batch_norm]") {
  auto p = params(4, 2);
  const auto x = at::randn({3, 4, 2, 2});
  auto rm = p.rm.clone(), rv = p.rv.clone();
  const auto call = [&](const at::Tensor& xx, const at::Tensor& w, bool training = true, double momentum = 0.1,
                        double eps = 1e-5) {
    kiln::ops::batch_norm(xx, w, p.b, rm, rv, training, momentum, eps, true);
  };
  CHECK_THROWS_WITH(call(x.to(at::kDouble), p.w), Contains("kiln::batch_norm_forward: x: expected dtype Float, BFloat16 or Half, got Double"));
  CHECK_THROWS_WITH(call(at::randn({4}), p.w), Contains("x: expected (N, C, ...) with at least 2 dimensions"));
  CHECK_THROWS_WITH(call(x, at::ones({3})), Contains("weight: expected shape [4] (x's channels), got [3]"));
  CHECK_THROWS_WITH(call(x, p.w.to(at::kDouble)), Contains("weight: expected dtype Float, got Double"));
  CHECK_THROWS_WITH(call(x, p.w, true, 1.5), Contains("momentum: expected a number in [0, 1], got 1.5"));
  CHECK_THROWS_WITH(call(x, p.w, true, 0.1, -1.0), Contains("eps: expected a finite number >= 0, got -1"));
  CHECK_THROWS_WITH(call(at::randn({1, 4}), p.w),
                    Contains("x: expected more than 1 value per channel when training, got shape [1, 4]"));
  CHECK(at::equal(rm, p.rm));  // nothing was updated by a refused call
  // The backward names its saved statistics as such.
  CHECK_THROWS_WITH(kiln::ops::batch_norm_backward(x, x, p.w, p.b, p.rm, at::ones({3}), true, true, {true, true, true}),
                    Contains("kiln::batch_norm_backward: invstd: expected shape [4] (x's channels), got [3]"));
  // An empty batch in evaluation is no error.
  CHECK(kiln::ops::batch_norm(at::randn({0, 4, 2, 2}), p.w, p.b, rm, rv, false, 0.1, 1e-5, true).numel() == 0);
}
