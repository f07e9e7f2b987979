// kiln::gelu: forward against ATen's tanh GELU (and within 1e-6 relative of the
// float64 truth in float), gradients and gradients of gradients against central
// differences, CUDA against CPU, non-contiguous inputs, bad input, autocast.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <tuple>

#include "gelu_truth.h"
#include "ops/ops.h"
#include "support.h"

using kiln::test::gradcheck;
using kiln::test::kFloatingDtypes;
using kiln::test::tolerance_for;

namespace {

// Values across the whole useful range, with the saturated tails and exact zero.
at::Tensor sample(int64_t n, at::ScalarType dtype) {
  auto x = at::randn({n}, at::kDouble) * 3;
  if (n > 4) x.narrow(0, 0, 4).copy_(at::tensor({0.0, -12.0, 12.0, -30.0}, at::kDouble));
  return x.to(dtype);
}

at::Tensor reference(const at::Tensor& x) { return at::gelu(x.to(at::kDouble), "tanh"); }

}  // namespace

TEST_CASE("gelu forward matches ATen's tanh GELU for every dtype", "[ops][gelu]") {
  for (const auto dtype : kFloatingDtypes) {
    for (const int64_t n : {0, 1, 15, 1000, 70001}) {
      INFO("dtype " << dtype << ", n " << n);
      const auto x = sample(n, dtype);
      const auto y = kiln::ops::gelu(x);
      REQUIRE(y.scalar_type() == dtype);
      const auto tol = tolerance_for(dtype);
      KILN_REQUIRE_CLOSE(y, reference(x), tol.rtol, tol.atol);
    }
  }
}

namespace {

// gelu and its gradient in float on `device` within 1e-6 relative of float64.
void require_float_gelu_accuracy(const at::Device device) {
  INFO("device " << device);
  // kiln evaluates the tanh form as x / (1 + exp(−2u)) with one exp and one
  // division. The float64 truth uses the same identity, because the tanh form
  // itself cancels in the negative tail even in float64. Bound: 1e-6 relative,
  // with an absolute floor of 1e-9 (float resolution of outputs near 0; the
  // derivative crosses 0 at x ≈ −0.75, where only 1e-7 absolute is meaningful).
  const auto x = at::cat({at::linspace(-9, 9, 200001, at::kFloat), at::randn({100000}) * 4});
  const auto xd = x.to(at::kDouble);
  const auto [two_u, truth, dtruth] = kiln::test::gelu_truth(xd);
  const auto xv = x.to(device);
  const auto y = kiln::ops::gelu(xv).cpu();
  const auto dy = kiln::ops::gelu_backward(at::ones_like(xv), xv).cpu();
  KILN_REQUIRE_CLOSE(y, truth, 1e-6, 1e-9);
  KILN_REQUIRE_CLOSE(dy, dtruth, 1e-6, 1e-7);

  // The negative tail (x < −3), where gelu and its derivative fall from 1e-3 to 1e-34
  // and the floors above let anything below 1e-9 (x < −5.8) pass, even 0.
  // There no float evaluation is better than the rounding of 2u, which moves the
  // result by |2u| times as much relatively: so 1e-6·(1 + |2u|) relative, down to a
  // floor where the exp's argument is capped (gelu_math::kExpCap = 80, x ≲ −10): there
  // gelu is below |x|·e^−80 < 1e-32 and its derivative below 0.22·|x|³·e^−80 < 1e-29.
  const auto tail = xd < -3;
  REQUIRE(tail.sum().item<int64_t>() > 10000);
  for (const auto& [name, actual, expected, floor] :
       {std::tuple{"gelu", y, truth, 1e-32}, std::tuple{"gelu'", dy, dtruth, 1e-29}}) {
    const auto bound = 1e-6 * expected.abs() * (1 + two_u.abs()) + floor;
    const auto excess = ((actual.to(at::kDouble) - expected).abs() / bound).masked_fill(~tail, 0);
    const auto i = excess.argmax().item<int64_t>();
    INFO(name << ": worst at x = " << xd[i].item<double>() << ": " << actual[i].item<double>()
              << ", expected " << expected[i].item<double>() << ", " << excess[i].item<double>()
              << " times the bound");
    CHECK(excess[i].item<double>() <= 1.0);
  }
}

}  // namespace

TEST_CASE("gelu in float stays within 1e-6 relative error of float64", "[ops][gelu]") {
  require_float_gelu_accuracy(at::kCPU);
}

// On CUDA the float division is a refined reciprocal (gelu_cuda_math.cuh), not IEEE's.
TEST_CASE("gelu on CUDA in float stays within 1e-6 relative error of float64", "[ops][gelu][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  require_float_gelu_accuracy(at::kCUDA);
}

TEST_CASE("gelu backward matches ATen's and central differences", "[ops][gelu]") {
  for (const auto dtype : kFloatingDtypes) {
    INFO("dtype " << dtype);
    const auto x = sample(4097, dtype);
    const auto g = at::randn({4097}).to(dtype);
    const auto tol = tolerance_for(dtype);
    KILN_REQUIRE_CLOSE(kiln::ops::gelu_backward(g, x),
                       at::gelu_backward(g.to(at::kDouble), x.to(at::kDouble), "tanh"), tol.rtol,
                       tol.atol);
  }
  const auto c = gradcheck([](const at::Tensor& t) { return kiln::ops::gelu(t); },
                           at::randn({5, 7}, at::kDouble) * 2);
  INFO(c.report);
  REQUIRE(c.ok);
}

TEST_CASE("gelu is differentiable twice", "[ops][gelu]") {
  const auto x0 = at::randn({4, 6}, at::kDouble) * 2;
  const auto w = at::randn({4, 6}, at::kDouble);
  // d/dx <gelu'(x), w>: through gelu_backward's own backward.
  const auto first = [&](const at::Tensor& x) {
    // Analytic pass: x requires grad and stays in the graph; numeric pass: a fresh leaf.
    const auto xr = x.requires_grad() ? x : x.detach().requires_grad_(true);
    return torch::autograd::grad({kiln::ops::gelu(xr)}, {xr}, {w}, true, true)[0];
  };
  const auto c = gradcheck(first, x0, 1e-6, 1e-5, 1e-6);
  INFO(c.report);
  REQUIRE(c.ok);
  // And against ATen's own double backward of the tanh GELU.
  const auto x = x0.clone().requires_grad_(true);
  const auto gx = torch::autograd::grad({kiln::ops::gelu(x)}, {x}, {w}, true, true)[0];
  const auto ggx = torch::autograd::grad({gx.sum()}, {x})[0];
  const auto xa = x0.clone().requires_grad_(true);
  const auto gxa = torch::autograd::grad({at::gelu(xa, "tanh")}, {xa}, {w}, true, true)[0];
  const auto ggxa = torch::autograd::grad({gxa.sum()}, {xa})[0];
  KILN_REQUIRE_CLOSE(ggx, ggxa, 1e-10, 1e-12);
}

TEST_CASE("gelu is correct on non-contiguous inputs", "[ops][gelu]") {
  const auto base = at::randn({64, 48});
  for (const auto& x : {base.t(), base.slice(1, 0, 48, 3)}) {
    KILN_REQUIRE_CLOSE(kiln::ops::gelu(x), reference(x), 1e-5, 1e-6);
    const auto g = at::randn_like(x).t().contiguous().t();
    KILN_REQUIRE_CLOSE(kiln::ops::gelu_backward(g, x),
                       at::gelu_backward(g.to(at::kDouble), x.to(at::kDouble), "tanh"), 1e-5, 1e-6);
  }
}

TEST_CASE("gelu rejects bad input with a message naming the argument", "[ops][gelu]") {
  REQUIRE_THROWS_WITH(kiln::ops::gelu(at::ones({2}, at::kLong)),
                      Catch::Contains("kiln::gelu: x: expected a floating-point tensor") &&
                          Catch::Contains("Long"));
  REQUIRE_THROWS_WITH(kiln::ops::gelu_backward(at::ones({2, 3}), at::ones({3, 2})),
                      Catch::Contains("kiln::gelu_backward: x: expected shape [2, 3]"));
}

TEST_CASE("under CPU autocast gelu keeps its input's dtype", "[ops][gelu][autocast]") {
  const auto x = at::randn({16});
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  const auto y = kiln::ops::gelu(x);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  REQUIRE(y.scalar_type() == at::kFloat);
}

TEST_CASE("gelu on CUDA matches CPU for every dtype", "[ops][gelu][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  for (const auto dtype : kFloatingDtypes) {
    INFO("dtype " << dtype);
    const auto x = sample(100003, dtype);
    const auto g = at::randn({100003}).to(dtype);
    kiln::test::require_cuda_matches_cpu(
        [](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{kiln::ops::gelu(in[0]), kiln::ops::gelu_backward(in[1], in[0])};
        },
        {x, g}, tolerance_for(dtype));
    // An unaligned view takes the scalar path.
    kiln::test::require_cuda_matches_cpu(
        [](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{kiln::ops::gelu(in[0].narrow(0, 1, 999))};
        },
        {x}, tolerance_for(dtype));
  }
}

namespace {

// gelu and its gradient on `device` in half and bfloat16 within one ulp of the dtype of
// the float64 truth, over the range where neither is saturated yet.
void require_reduced_gelu_within_one_ulp(const at::Device device) {
  for (const auto dtype : {at::kHalf, at::kBFloat16}) {
    INFO("dtype " << dtype << " on " << device);
    const auto x = at::linspace(-8, 8, 200003, at::kDouble).to(dtype);
    const auto g = at::randn({200003}, at::kDouble).to(dtype);
    const auto truth = kiln::test::gelu_truth(x.to(at::kDouble));
    {
      INFO("forward");
      const auto c = kiln::test::within_one_ulp(kiln::ops::gelu(x.to(device)), truth.y);
      INFO(c.report);
      REQUIRE(c.ok);
    }
    {
      INFO("backward");
      const auto c = kiln::test::within_one_ulp(kiln::ops::gelu_backward(g.to(device), x.to(device)),
                                                g.to(at::kDouble) * truth.dy, kiln::test::kDerivativeSlack * g.abs());
      INFO(c.report);
      REQUIRE(c.ok);
    }
  }
}

}  // namespace

TEST_CASE("gelu in half and bfloat16 is within one ulp of float64", "[ops][gelu]") {
  require_reduced_gelu_within_one_ulp(at::kCPU);
}

// On CUDA, half and bfloat16 take the approximate exp and division (gelu_cuda_math.cuh).
TEST_CASE("gelu on CUDA in half and bfloat16 is within one ulp of float64", "[ops][gelu][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  require_reduced_gelu_within_one_ulp(at::kCUDA);
}
