// kiln::scaled_add: forward against ATen for every dtype, gradients against
// central differences (first and second order), CUDA against CPU, non-contiguous
// inputs, bad input, and the autocast promotion of mixed dtypes.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "ops/ops.h"
#include "support.h"

using kiln::test::gradcheck;
using kiln::test::kFloatingDtypes;
using kiln::test::tolerance_for;

namespace {

// Sizes around the vector widths and the parallel grain, an empty one, and one
// past every L2 in every dtype (streamed()'s prefetching path, with a ragged end).
const std::vector<int64_t> kSizes = {0, 1, 7, 16, 33, 1000, 70001, (1 << 21) + 37};
const std::vector<double> kAlphas = {2.0, -0.37, 0.0};

// alpha·x + y in float64 on the same (rounded) values.
at::Tensor reference(const at::Tensor& x, const at::Tensor& y, double alpha) {
  return alpha * x.to(at::kDouble) + y.to(at::kDouble);
}

}  // namespace

TEST_CASE("scaled_add forward matches alpha·x + y for every dtype", "[ops][scaled_add]") {
  for (const auto dtype : kFloatingDtypes) {
    const auto tol = tolerance_for(dtype);
    for (const double alpha : kAlphas) {
      for (const int64_t n : kSizes) {
        INFO("dtype " << dtype << ", alpha " << alpha << ", n " << n);
        const auto x = at::randn({n}).to(dtype), y = at::randn({n}).to(dtype);
        const auto z = kiln::ops::scaled_add(x, y, alpha);
        REQUIRE(z.scalar_type() == dtype);
        KILN_REQUIRE_CLOSE(z, reference(x, y, alpha), tol.rtol, tol.atol);
      }
    }
  }
  // The documents' input1 + input2·2.
  const auto a = at::randn({5, 3}), b = at::randn({5, 3});
  KILN_REQUIRE_CLOSE(kiln::ops::scaled_add(b, a, 2.0), a + b * 2, 1e-6, 1e-6);
}

TEST_CASE("scaled_add computes half types in float, rounding once", "[ops][scaled_add]") {
  // One fused multiply-add in float, then one rounding: against the exact result
  // rounded to the dtype only rare double roundings may differ; arithmetic in half
  // (alpha, alpha·x and the sum each rounded) differs often.
  for (const auto dtype : {at::kHalf, at::kBFloat16}) {
    const auto x = at::randn({20000}).to(dtype), y = at::randn({20000}).to(dtype);
    const auto exact = reference(x, y, 1.0 / 3).to(dtype);
    const auto mismatches = (kiln::ops::scaled_add(x, y, 1.0 / 3) != exact).sum().item<int64_t>();
    INFO("dtype " << dtype << ": " << mismatches << " of 20000 differ from the rounded exact value");
    REQUIRE(mismatches <= 100);
    const auto [gx, gy] = kiln::ops::scaled_add_backward(y, 1.0 / 3);
    REQUIRE((gx != (y.to(at::kDouble) / 3).to(dtype)).sum().item<int64_t>() <= 100);
  }
}

TEST_CASE("scaled_add_backward is (alpha·grad, grad) for every dtype", "[ops][scaled_add]") {
  for (const auto dtype : kFloatingDtypes) {
    INFO("dtype " << dtype);
    const auto tol = tolerance_for(dtype);
    for (const int64_t n : {int64_t{70001}, kSizes.back()}) {
      const auto g = at::randn({n}).to(dtype);
      const auto [gx, gy] = kiln::ops::scaled_add_backward(g, -1.25);
      REQUIRE(gx.scalar_type() == dtype);
      KILN_REQUIRE_CLOSE(gx, -1.25 * g.to(at::kDouble), tol.rtol, tol.atol);
      KILN_REQUIRE_CLOSE(gy, g, 0.0, 0.0);
    }
  }
}

TEST_CASE("scaled_add gradients match central differences", "[ops][scaled_add]") {
  const auto x = at::randn({4, 9}, at::kDouble), y = at::randn({4, 9}, at::kDouble);
  for (const double alpha : kAlphas) {
    INFO("alpha " << alpha);
    auto c = gradcheck([&](const at::Tensor& t) { return kiln::ops::scaled_add(t, y, alpha); }, x);
    INFO(c.report);
    REQUIRE(c.ok);
    c = gradcheck([&](const at::Tensor& t) { return kiln::ops::scaled_add(x, t, alpha); }, y);
    INFO(c.report);
    REQUIRE(c.ok);
  }
}

TEST_CASE("scaled_add backward is differentiable (double backward)", "[ops][scaled_add]") {
  const auto x = at::randn({3, 5}, at::kDouble).requires_grad_(true);
  const auto y = at::randn({3, 5}, at::kDouble).requires_grad_(true);
  const auto v = at::randn({3, 5}, at::kDouble);
  // v ↦ d/dx <scaled_add(x, y), v> + 3·d/dy <…>: its gradient is alpha + 3.
  const auto g = [&](const at::Tensor& vv) {
    const auto z = kiln::ops::scaled_add(x, y, 1.5);
    const auto gs = torch::autograd::grad({z}, {x, y}, {vv}, /*retain_graph=*/true,
                                          /*create_graph=*/true);
    return gs[0] + 3 * gs[1];
  };
  const auto c = gradcheck(g, v);
  INFO(c.report);
  REQUIRE(c.ok);
}

TEST_CASE("scaled_add is correct on non-contiguous inputs", "[ops][scaled_add]") {
  const auto base = at::randn({64, 48});
  const auto other = at::randn({48, 64}).t();  // transposed: (64, 48), non-contiguous
  for (const auto& [x, y] : std::vector<std::pair<at::Tensor, at::Tensor>>{
           {base.t(), other.t()},
           {base.slice(1, 0, 48, 3), other.slice(1, 0, 48, 3)},
           {base.narrow(0, 5, 20), other.narrow(0, 5, 20)}}) {
    REQUIRE_FALSE((x.is_contiguous() && x.storage_offset() == 0));
    const auto tol = tolerance_for(at::kFloat);
    KILN_REQUIRE_CLOSE(kiln::ops::scaled_add(x, y, 0.5), reference(x, y, 0.5), tol.rtol, tol.atol);
    const auto xg = x.clone().requires_grad_(true), yg = y.clone().requires_grad_(true);
    const auto g = at::randn_like(x).t().contiguous().t();  // a transposed gradient
    kiln::ops::scaled_add(xg, yg, 0.5).backward(g);
    KILN_REQUIRE_CLOSE(xg.grad(), 0.5 * g, 0.0, 0.0);
    KILN_REQUIRE_CLOSE(yg.grad(), g, 0.0, 0.0);
  }
}

TEST_CASE("scaled_add rejects bad input with a message naming the argument",
          "[ops][scaled_add]") {
  REQUIRE_THROWS_WITH(kiln::ops::scaled_add(at::ones({3}, at::kInt), at::ones({3}, at::kInt), 1.0),
                      Catch::Contains("kiln::scaled_add: x: expected a floating-point tensor") &&
                          Catch::Contains("Int"));
  REQUIRE_THROWS_WITH(kiln::ops::scaled_add(at::ones({3}), at::ones({4}), 1.0),
                      Catch::Contains("kiln::scaled_add: y: expected shape [3] (the shape of x)") &&
                          Catch::Contains("got [4]"));
  REQUIRE_THROWS_WITH(kiln::ops::scaled_add(at::ones({3}), at::ones({3}, at::kDouble), 1.0),
                      Catch::Contains("kiln::scaled_add: y: expected dtype Float (the dtype of x)") &&
                          Catch::Contains("got Double"));
  REQUIRE_THROWS_WITH(kiln::ops::scaled_add(at::ones({3}, at::kHalf), at::ones({3}, at::kBFloat16), 1.0),
                      Catch::Contains("kiln::scaled_add: y: expected dtype Half (the dtype of x)"));
  REQUIRE_THROWS_WITH(kiln::ops::scaled_add(at::ones({3}), at::ones({4}, at::kBFloat16), 1.0),
                      Catch::Contains("kiln::scaled_add: y: expected shape [3] (the shape of x)"));
  REQUIRE_THROWS_WITH(kiln::ops::scaled_add_backward(at::ones({3}, at::kLong), 1.0),
                      Catch::Contains("kiln::scaled_add_backward: grad: expected a floating-point"));
  REQUIRE_THROWS_WITH(kiln::ops::scaled_add_backward(at::ones({3}, at::kBFloat16), 1.0, at::kFloat),
                      Catch::Contains("kiln::scaled_add_backward: x_dtype: expected grad's dtype "
                                      "(BFloat16) or, with a Float grad, Half or BFloat16, got Float"));
  if (torch::cuda::is_available())
    REQUIRE_THROWS_WITH(kiln::ops::scaled_add(at::ones({3}), at::ones({3}).cuda(), 1.0),
                        Catch::Contains("kiln::scaled_add: y: expected device cpu"));
}

TEST_CASE("scaled_add on CUDA matches CPU for every dtype", "[ops][scaled_add][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  for (const auto dtype : kFloatingDtypes) {
    for (const int64_t n : kSizes) {
      INFO("dtype " << dtype << ", n " << n);
      const auto x = at::randn({n}).to(dtype), y = at::randn({n}).to(dtype);
      kiln::test::require_cuda_matches_cpu(
          [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
            const auto [gx, gy] = kiln::ops::scaled_add_backward(in[1], 0.75);
            return {kiln::ops::scaled_add(in[0], in[1], -2.5), gx, gy};
          },
          {x, y}, tolerance_for(dtype));
    }
    // float32 with a half type, and the half-type gradient of the backward op.
    if (dtype == at::kFloat) {
      const auto f = at::randn({1001}), h = at::randn({1001}).to(at::kBFloat16);
      kiln::test::require_cuda_matches_cpu(
          [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
            const auto [gx, gy] = kiln::ops::scaled_add_backward(in[0], 0.5, at::kBFloat16);
            return {kiln::ops::scaled_add(in[1], in[0], 2.0), gx};
          },
          {f, h}, tolerance_for(at::kBFloat16));
      // The forward's one pass (cuda scaled_add_forward_mixed): each half type on
      // either side, packed with a tail, rows copied dense, unaligned views (the scalar
      // path), and a transposed float32 side; the same float32 fused multiply-add as
      // kiln's float32 kernel on widened copies.
      for (const auto low : {at::kBFloat16, at::kHalf}) {
        const auto hb = at::randn({64, 1003}).to(low).cuda(), fb = at::randn({64, 1003}).cuda();
        const auto ft = at::randn({1003, 64}).cuda().t();
        const std::vector<std::pair<at::Tensor, at::Tensor>> pairs = {
            {hb, fb}, {fb, hb}, {hb.narrow(1, 1, 1001), fb.narrow(1, 1, 1001)},
            {hb.view(-1).narrow(0, 1, 64001), fb.view(-1).narrow(0, 3, 64001)},
            {fb.view(-1).narrow(0, 1, 64001), hb.view(-1).narrow(0, 1, 64001)}, {hb, ft}, {ft, hb}};
        for (const auto& [x, y] : pairs) {
          INFO(low << ": x " << x.scalar_type() << " strides " << x.strides() << ", y "
                   << y.scalar_type() << " strides " << y.strides());
          const auto z = kiln::ops::scaled_add(x, y, -0.37);
          REQUIRE(z.scalar_type() == at::kFloat);
          REQUIRE(z.is_cuda());
          REQUIRE(at::equal(z, kiln::ops::scaled_add(x.to(at::kFloat), y.to(at::kFloat), -0.37)));
          REQUIRE(at::allclose(z.cpu(), kiln::ops::scaled_add(x.cpu(), y.cpu(), -0.37), 1e-6, 1e-6));
        }
      }
      // The backward's one-pass gradient in each half type (cuda scaled_add_scale_to):
      // packed, with a tail, unaligned, and of a transposed (dense, not contiguous) grad,
      // each within one ulp of alpha·grad in float64, in the grad's strides.
      for (const auto low : {at::kBFloat16, at::kHalf}) {
        const auto g = at::randn({64, 1003}).cuda();
        for (const auto& view : {g, g.narrow(1, 1, 1001), g.t()}) {
          INFO(low << ", grad of shape " << view.sizes() << " and strides " << view.strides());
          const auto [gx, gy] = kiln::ops::scaled_add_backward(view, 0.3, low);
          REQUIRE(gx.scalar_type() == low);
          REQUIRE(gx.is_cuda());
          REQUIRE(gy.is_same(view));
          if (view.is_non_overlapping_and_dense()) REQUIRE(gx.strides() == view.strides());
          const auto c = kiln::test::within_one_ulp(gx, view.to(at::kDouble) * 0.3);
          INFO(c.report);
          REQUIRE(c.ok);
        }
      }
    }
    // Unaligned views take the scalar path.
    const auto x = at::randn({1001}).to(dtype), y = at::randn({1001}).to(dtype);
    kiln::test::require_cuda_matches_cpu(
        [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
          return {kiln::ops::scaled_add(in[0].narrow(0, 1, 999), in[1].narrow(0, 2, 999), 3.0)};
        },
        {x, y}, tolerance_for(dtype));
  }
}

TEST_CASE("under CPU autocast scaled_add promotes mixed dtypes", "[ops][scaled_add][autocast]") {
  const auto x = at::randn({8, 8});
  const auto yb = at::randn({8, 8}).to(at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  const auto mixed = kiln::ops::scaled_add(x, yb, 2.0);                      // float + bf16
  const auto mixed_rev = kiln::ops::scaled_add(yb, x, 2.0);                  // bf16 + float
  const auto same = kiln::ops::scaled_add(yb, yb, 2.0);                      // stays bf16
  const auto kept = kiln::ops::scaled_add(x, x, 2.0);                        // stays float
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  REQUIRE(mixed.scalar_type() == at::kFloat);
  REQUIRE(mixed_rev.scalar_type() == at::kFloat);
  REQUIRE(same.scalar_type() == at::kBFloat16);
  REQUIRE(kept.scalar_type() == at::kFloat);
  const auto tol = tolerance_for(at::kFloat);
  KILN_REQUIRE_CLOSE(mixed, reference(x, yb, 2.0), tol.rtol, tol.atol);
  KILN_REQUIRE_CLOSE(mixed_rev, reference(yb, x, 2.0), tol.rtol, tol.atol);
  // Outside autocast the kernels take the same pair as it is, with the same result.
  REQUIRE(at::equal(kiln::ops::scaled_add(x, yb, 2.0), mixed));
}

TEST_CASE("scaled_add takes float32 with a half type in float32, gradients in each input's dtype",
          "[ops][scaled_add]") {
  for (const auto low : {at::kHalf, at::kBFloat16}) {
    for (const int64_t n : kSizes) {
      for (const bool low_first : {true, false}) {
        INFO("half type " << low << ", n " << n << ", half type first " << low_first);
        const auto h = at::randn({n}).to(low), f = at::randn({n});
        const auto& x = low_first ? h : f;
        const auto& y = low_first ? f : h;
        const auto z = kiln::ops::scaled_add(x, y, -0.37);
        REQUIRE(z.scalar_type() == at::kFloat);
        // One float32 fused multiply-add on the widened values, as a float32 copy gives.
        REQUIRE(at::equal(z, kiln::ops::scaled_add(x.to(at::kFloat), y.to(at::kFloat), -0.37)));
        // Gradients: each in its input's dtype, x's rounded once from alpha·grad.
        const auto xl = x.detach().requires_grad_(true), yl = y.detach().requires_grad_(true);
        const auto g = at::randn({n});
        kiln::ops::scaled_add(xl, yl, -0.37).backward(g);
        REQUIRE(xl.grad().scalar_type() == x.scalar_type());
        REQUIRE(yl.grad().scalar_type() == y.scalar_type());
        REQUIRE(at::equal(xl.grad(), (g * -0.37).to(x.scalar_type())));
        REQUIRE(at::equal(yl.grad(), g.to(y.scalar_type())));
      }
    }
    // The backward op alone: x's gradient in x_dtype, y's grad itself.
    const auto g = at::randn({70001});
    const auto [gx, gy] = kiln::ops::scaled_add_backward(g, 2.5, low);
    REQUIRE(gx.scalar_type() == low);
    REQUIRE(at::equal(gx, (g * 2.5).to(low)));
    REQUIRE(gy.is_same(g));
  }
  // Laid out alike whatever the inputs' layouts: a transposed float32 y.
  const auto x = at::randn({40, 30}).to(at::kBFloat16), y = at::randn({30, 40}).t();
  REQUIRE(at::equal(kiln::ops::scaled_add(x, y, 2.0), kiln::ops::scaled_add(x.to(at::kFloat), y.contiguous(), 2.0)));
  // Meta: the float32 output and the half-type gradient, without data.
  const auto meta = at::TensorOptions().device(at::kMeta);
  REQUIRE(kiln::ops::scaled_add(at::empty({5, 3}, meta.dtype(at::kHalf)), at::empty({5, 3}, meta), 1.0)
              .scalar_type() == at::kFloat);
  REQUIRE(std::get<0>(kiln::ops::scaled_add_backward(at::empty({5, 3}, meta), 1.0, at::kBFloat16))
              .scalar_type() == at::kBFloat16);
  // Double backward through a mixed pair: d(alpha·gx + gy)/dgrad in grad's dtype.
  const auto xl = at::randn({64}).to(at::kBFloat16).requires_grad_(true), yl = at::randn({64}).requires_grad_(true);
  const auto g = at::randn({64}).requires_grad_(true);
  const auto z = kiln::ops::scaled_add(xl, yl, 3.0);
  const auto grads = torch::autograd::grad({z}, {xl, yl}, {g}, true, true);
  const auto dg = torch::autograd::grad({grads[0].to(at::kFloat).sum() + grads[1].sum()}, {g});
  REQUIRE(dg[0].scalar_type() == at::kFloat);
  REQUIRE(at::allclose(dg[0], at::full({64}, 4.0)));
}
