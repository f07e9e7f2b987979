// kiln::sigmoid: forward against ATen for every dtype (and every CPU capability
// build), gradients against central differences (first and second order, with and
// without grad_clip), CUDA against CPU, non-contiguous inputs, bad input, autocast.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "ops/cpu_capability.h"
#include "ops/op_support.h"
#include "ops/ops.h"
#include "ops/sigmoid/sigmoid_kernel.h"
#include "cpu_builds.h"
#include "support.h"

using kiln::test::gradcheck;
using kiln::test::kFloatingDtypes;
using kiln::test::tolerance_for;

namespace {

// Sizes around the vector widths and the parallel grain, plus an empty one.
const std::vector<int64_t> kSizes = {0, 1, 7, 16, 33, 1000, 70001};
const std::vector<double> kBetas = {1.0, 2.5, -0.7};

// Normal samples, with the far tails (|beta·x| up to 1e4) where a naive
// 1/(1+exp(−z)) overflows exp.
at::Tensor sample(int64_t n, at::ScalarType dtype) {
  auto x = at::randn({n}, at::kFloat);
  const std::vector<float> tails = {0.0f, 1e4f, -1e4f, 90.0f, -90.0f, 30.0f, -30.0f};
  for (int64_t i = 0; i < std::min<int64_t>(n, static_cast<int64_t>(tails.size())); ++i)
    x[i] = tails[i];
  return x.to(dtype);
}

// The documents' CustomSigmoid in float64 on the same (rounded) values.
at::Tensor reference(const at::Tensor& x, double beta) { return at::sigmoid(x.to(at::kDouble) * beta); }
at::Tensor reference_backward(const at::Tensor& g, const at::Tensor& s, double beta,
                              std::optional<double> clip) {
  const auto sd = s.to(at::kDouble);
  auto local = beta * sd * (1 - sd);
  if (clip) local = local.clamp(-*clip, *clip);
  return local * g.to(at::kDouble);
}

// Points whose local derivative 2·s·(1−s) (beta = 2) is well above the clamp at
// 0.3 (the first 12: |x| < 0.45, ≥ 0.41) or well below it (the last 12: |x| > 1,
// ≤ 0.21), never on it.
constexpr double kBeta = 2.0, kClip = 0.3;
at::Tensor points_off_the_clamp() {
  const auto inside = at::rand({12}, at::kDouble) * 0.9 - 0.45;
  const auto outside = (at::rand({12}, at::kDouble) * 2 + 1) *
                       (at::randint(0, 2, {12}, at::kDouble) * 2 - 1);
  return at::cat({inside, outside}).reshape({4, 6});
}

// The forward kernel of every CPU capability build this machine can run, by name.
auto forward_builds() { return KILN_CPU_BUILDS(sigmoid_forward); }

}  // namespace

TEST_CASE("sigmoid forward matches at::sigmoid(beta·x) for every dtype", "[ops][sigmoid]") {
  for (const auto dtype : kFloatingDtypes) {
    const auto tol = tolerance_for(dtype);
    for (const double beta : kBetas) {
      for (const int64_t n : kSizes) {
        INFO("dtype " << dtype << ", beta " << beta << ", n " << n);
        const auto x = sample(n, dtype);
        const auto s = kiln::ops::sigmoid(x, beta);
        REQUIRE(s.scalar_type() == dtype);
        REQUIRE_FALSE(s.isnan().any().item<bool>());
        KILN_REQUIRE_CLOSE(s, reference(x, beta), tol.rtol, tol.atol);
      }
    }
  }
}

namespace {

// Half types on `device` computed in float and rounded once: against the exact result
// rounded to the dtype only rare double roundings may differ (arithmetic in half —
// beta, beta·x, exp, … each rounded — differs often), and every value is within one
// ulp of the exact one, over the range where s is not yet 0 or 1 in the dtype.
void require_half_sigmoid_rounds_once(const at::Device device) {
  for (const auto dtype : {at::kHalf, at::kBFloat16}) {
    INFO("dtype " << dtype << " on " << device);
    const auto x = (at::randn({20000}) * 4).to(dtype);
    const auto exact = reference(x, 1.0 / 3).to(dtype);
    const auto mismatches = (kiln::ops::sigmoid(x.to(device), 1.0 / 3).cpu() != exact).sum().item<int64_t>();
    INFO(mismatches << " of 20000 differ from the rounded exact value");
    REQUIRE(mismatches <= 100);
    const auto grid = at::linspace(-30, 30, 200003, at::kDouble).to(dtype);
    const auto c = kiln::test::within_one_ulp(kiln::ops::sigmoid(grid.to(device), 1.0).cpu(),
                                              at::sigmoid(grid.to(at::kDouble)));
    INFO(c.report);
    REQUIRE(c.ok);
  }
}

}  // namespace

TEST_CASE("sigmoid computes half types in float, rounding once", "[ops][sigmoid]") {
  require_half_sigmoid_rounds_once(at::kCPU);
}

// On CUDA the half types take the special function unit's exp and reciprocal.
TEST_CASE("sigmoid on CUDA computes half types in float, rounding once", "[ops][sigmoid][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  require_half_sigmoid_rounds_once(at::kCUDA);
}

TEST_CASE("sigmoid is accurate in the far tails and propagates NaN", "[ops][sigmoid]") {
  // Relative accuracy in the tail where s is tiny: the stable form gives e/(1+e).
  const auto x = torch::tensor(
      std::vector<double>{-20.0, -50.0, -80.0, -700.0, 700.0, std::nan("")}, at::kDouble);
  const auto s = kiln::ops::sigmoid(x, 1.0);
  KILN_REQUIRE_CLOSE(s, at::sigmoid(x), 1e-14, 0.0);
  const auto xf = torch::tensor({-20.0f, -50.0f, -80.0f, 1e30f, -1e30f, NAN});
  KILN_REQUIRE_CLOSE(kiln::ops::sigmoid(xf, 1.0), at::sigmoid(xf.to(at::kDouble)), 1e-6, 0.0);
}

TEST_CASE("every compiled CPU capability gives the same sigmoid", "[ops][sigmoid]") {
  using kiln::ops::Stores;
  for (const auto& [name, fn] : forward_builds()) {
    for (const auto dtype : kFloatingDtypes) {
      for (const auto stores : {Stores::kCached, Stores::kStreaming}) {
        INFO("capability " << name << ", dtype " << dtype << ", streaming "
                           << (stores == Stores::kStreaming));
        const auto tol = tolerance_for(dtype);
        const auto x = sample(1037, dtype);
        auto s = at::empty({1038}, x.options()).narrow(0, 1, 1037);  // an unaligned output
        fn(kiln::ops::kernel_dtype(x), x.const_data_ptr(), s.data_ptr(), x.numel(), 1.5, stores);
        KILN_REQUIRE_CLOSE(s, reference(x, 1.5), tol.rtol, tol.atol);
      }
    }
  }
}

TEST_CASE("sigmoid in float is within 4 ULP of the exact value wherever that is a normal float",
          "[ops][sigmoid]") {
  // Every 2^-12 from −110 to 110 (the tails where exp(±z) over- or underflows
  // included), for each capability build. The betas make beta·x exact in float: any
  // other rounds z, an error of |z| ULP in s that no kernel can remove.
  const auto x = at::arange(-110.0, 110.0, 1.0 / 4096, at::kFloat);
  for (const double beta : {1.0, -2.0}) {
    const auto exact = reference(x, beta);                      // float64
    const auto rounded = exact.to(at::kFloat);
    const auto ulp = (at::nextafter(rounded, at::full_like(rounded, INFINITY)) - rounded).to(at::kDouble);
    const auto normal = exact >= std::numeric_limits<float>::min();
    for (const auto& [name, fn] : forward_builds()) {
      auto s = at::empty_like(x);
      fn(kiln::ops::DType::kFloat, x.const_data_ptr(), s.data_ptr(), x.numel(), beta,
         kiln::ops::Stores::kCached);
      const auto err = (s.to(at::kDouble) - exact).abs();
      const auto ulps = at::where(normal, err / ulp, at::zeros_like(err));
      const auto worst = ulps.argmax().item<int64_t>();
      INFO("capability " << name << ", beta " << beta << ": worst " << ulps[worst].item<double>()
                         << " ULP at x = " << x[worst].item<float>() << " (kiln " << s[worst].item<float>()
                         << ", exact " << exact[worst].item<double>() << ")");
      REQUIRE(ulps[worst].item<double>() <= 4.0);
      // Below the normal range the result is 0 or a tiny value, never more than FLT_MIN off.
      REQUIRE(at::where(normal, at::zeros_like(err), err).max().item<double>() <=
              std::numeric_limits<float>::min());
    }
  }
}

TEST_CASE("sigmoid_backward matches the clamped local derivative for every dtype",
          "[ops][sigmoid]") {
  for (const auto dtype : kFloatingDtypes) {
    const auto tol = tolerance_for(dtype);
    for (const std::optional<double> clip : {std::optional<double>(), std::optional<double>(0.1)}) {
      INFO("dtype " << dtype << ", clip " << (clip ? *clip : -1.0));
      const auto s = at::rand({70001}).to(dtype);
      const auto g = at::randn({70001}).to(dtype);
      const auto gx = kiln::ops::sigmoid_backward(g, s, -1.5, clip);
      REQUIRE(gx.scalar_type() == dtype);
      KILN_REQUIRE_CLOSE(gx, reference_backward(g, s, -1.5, clip), tol.rtol, tol.atol);
    }
  }
}

TEST_CASE("sigmoid gradient matches central differences", "[ops][sigmoid]") {
  for (const double beta : kBetas) {
    INFO("beta " << beta);
    const auto x = at::randn({4, 9}, at::kDouble) * 3;
    const auto c = gradcheck([&](const at::Tensor& t) { return kiln::ops::sigmoid(t, beta); }, x);
    INFO(c.report);
    REQUIRE(c.ok);
  }
  // With the clamp the gradient is no longer the function's derivative: where it
  // is inactive (|x| > 1) it must match central differences, where it holds
  // (|x| < 0.45) it must be exactly clip·grad.
  const auto x = points_off_the_clamp();
  const auto outside = x.flatten().slice(0, 12, 24);
  const auto f = [](const at::Tensor& t) { return kiln::ops::sigmoid(t, kBeta, kClip); };
  const auto c = gradcheck(f, outside);
  INFO(c.report);
  REQUIRE(c.ok);
  const auto xg = x.clone().requires_grad_(true);
  kiln::ops::sigmoid(xg, kBeta, kClip).sum().backward();
  const auto s = at::sigmoid(kBeta * x);
  KILN_REQUIRE_CLOSE(xg.grad(), (kBeta * s * (1 - s)).clamp_max(kClip), 1e-12, 1e-12);
  REQUIRE((xg.grad().flatten().slice(0, 0, 12) == kClip).all().item<bool>());
}

TEST_CASE("sigmoid backward is differentiable (double backward)", "[ops][sigmoid]") {
  for (const std::optional<double> clip : {std::optional<double>(), std::optional<double>(kClip)}) {
    INFO("grad_clip " << (clip ? *clip : -1.0));
    const auto x0 = points_off_the_clamp();
    const auto v = at::randn({4, 6}, at::kDouble);
    // d/dv of d/dx <sigmoid(x), v>: the (clamped) local derivative, through d/dgrad.
    const auto x = x0.clone().requires_grad_(true);
    const auto g_of_v = [&](const at::Tensor& vv) {
      const auto s = kiln::ops::sigmoid(x, kBeta, clip);
      return torch::autograd::grad({s}, {x}, {vv}, /*retain_graph=*/true, /*create_graph=*/true)[0];
    };
    auto c = gradcheck(g_of_v, v);
    INFO(c.report);
    REQUIRE(c.ok);
    // d/dx of d/dx <sigmoid(x), v>: the second derivative, through d/ds (zero where clamped).
    const auto g_of_x = [&](const at::Tensor& t) {
      const auto leaf = t.requires_grad() ? t : t.detach().requires_grad_(true);
      const auto s = kiln::ops::sigmoid(leaf, kBeta, clip);
      return torch::autograd::grad({s}, {leaf}, {v}, /*retain_graph=*/true, /*create_graph=*/true)[0];
    };
    c = gradcheck(g_of_x, x0);
    INFO(c.report);
    REQUIRE(c.ok);
  }
}

TEST_CASE("sigmoid is correct on non-contiguous inputs", "[ops][sigmoid]") {
  const auto base = at::randn({64, 48});
  for (const auto& x : {base.t(), base.slice(1, 0, 48, 3), base.narrow(0, 5, 20)}) {
    REQUIRE_FALSE((x.is_contiguous() && x.storage_offset() == 0));
    const auto tol = tolerance_for(at::kFloat);
    KILN_REQUIRE_CLOSE(kiln::ops::sigmoid(x, 2.0), reference(x, 2.0), tol.rtol, tol.atol);
    const auto xg = x.clone().requires_grad_(true);
    const auto g = at::randn_like(x).t().contiguous().t();  // a transposed gradient
    kiln::ops::sigmoid(xg, 2.0, 0.25).backward(g);
    const auto s = at::sigmoid(2.0 * x);
    KILN_REQUIRE_CLOSE(xg.grad(), reference_backward(g, s, 2.0, 0.25), tol.rtol, tol.atol);
  }
}

TEST_CASE("sigmoid rejects bad input with a message naming the argument", "[ops][sigmoid]") {
  REQUIRE_THROWS_WITH(kiln::ops::sigmoid(at::ones({3}, at::kInt)),
                      Catch::Contains("kiln::sigmoid: x: expected a floating-point tensor") &&
                          Catch::Contains("Int"));
  REQUIRE_THROWS_WITH(kiln::ops::sigmoid(at::ones({3}), 1.0, -0.5),
                      Catch::Contains("kiln::sigmoid: grad_clip: expected a value >= 0") &&
                          Catch::Contains("got -0.5"));
  REQUIRE_THROWS_WITH(kiln::ops::sigmoid_backward(at::ones({3}), at::ones({3}), 1.0, -1.0),
                      Catch::Contains("kiln::sigmoid_backward: grad_clip: expected a value >= 0"));
  REQUIRE_THROWS_WITH(kiln::ops::sigmoid_backward(at::ones({3}), at::ones({4}), 1.0, std::nullopt),
                      Catch::Contains("kiln::sigmoid_backward: s: expected shape [3]") &&
                          Catch::Contains("got [4]"));
  REQUIRE_THROWS_WITH(
      kiln::ops::sigmoid_backward(at::ones({3}), at::ones({3}, at::kDouble), 1.0, std::nullopt),
      Catch::Contains("kiln::sigmoid_backward: s: expected dtype Float"));
}

TEST_CASE("sigmoid on CUDA matches CPU for every dtype", "[ops][sigmoid][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  for (const auto dtype : kFloatingDtypes) {
    for (const int64_t n : kSizes) {
      INFO("dtype " << dtype << ", n " << n);
      const auto x = sample(n, dtype);
      const auto g = at::randn({n}).to(dtype);
      const auto f = [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
        const auto s = kiln::ops::sigmoid(in[0], -1.3);
        return {s, kiln::ops::sigmoid_backward(in[1], s, -1.3, std::nullopt),
                kiln::ops::sigmoid_backward(in[1], s, -1.3, 0.2)};
      };
      kiln::test::require_cuda_matches_cpu(f, {x, g}, tolerance_for(dtype));
    }
    // An unaligned view takes the scalar path.
    const auto x = sample(1001, dtype).narrow(0, 1, 999);
    kiln::test::require_cuda_matches_cpu(
        [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
          return {kiln::ops::sigmoid(in[0].narrow(0, 1, 998), 2.0)};
        },
        {x}, tolerance_for(dtype));
  }
}

TEST_CASE("under CPU autocast sigmoid keeps its input's dtype", "[ops][sigmoid][autocast]") {
  const auto x = at::randn({8, 8});
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  const auto s = kiln::ops::sigmoid(x, 2.0);
  const auto sb = kiln::ops::sigmoid(x.to(at::kBFloat16), 2.0);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  REQUIRE(s.scalar_type() == at::kFloat);
  REQUIRE(sb.scalar_type() == at::kBFloat16);
  const auto tol = tolerance_for(at::kFloat);
  KILN_REQUIRE_CLOSE(s, reference(x, 2.0), tol.rtol, tol.atol);
}
