// kiln::cross_entropy: loss and log-sum-exp against ATen for every dtype (up to
// 50,000 classes) and every CPU capability build, gradients against central
// differences and ATen's autograd, CUDA against CPU, non-contiguous inputs, bad
// input (a target out of range names its row), autocast and inference mode.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cmath>

#include "ops/cpu_capability.h"
#include "ops/cross_entropy/cross_entropy_kernel.h"
#include "ops/op_support.h"
#include "ops/ops.h"
#include "cpu_builds.h"
#include "support.h"

using kiln::test::gradcheck;
using kiln::test::kFloatingDtypes;
using kiln::test::tolerance_for;

namespace {

// (B, C): single elements, odd sizes around the vector widths and the tile,
// the benchmark's C = 1000, and the largest vocabulary we support.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {
    {1, 1}, {3, 5}, {7, 17}, {5, 257}, {64, 1000}, {4, 50000}};

struct Sample {
  at::Tensor logits, target;
};
Sample sample(int64_t rows, int64_t classes, at::ScalarType dtype, double spread = 3.0) {
  return {(at::randn({rows, classes}) * spread).to(dtype), at::randint(0, classes, {rows}, at::kLong)};
}

// What ATen computes, in float64 on the same (rounded) logits.
at::Tensor reference_loss(const Sample& s) {
  return at::cross_entropy_loss(s.logits.to(at::kDouble), s.target);
}
at::Tensor reference_grad(const Sample& s, double g) {
  const auto x = s.logits.to(at::kDouble).requires_grad_(true);
  at::cross_entropy_loss(x, s.target).backward(torch::tensor(g, at::kDouble));
  return x.grad();
}
// The lse the kernels keep: float32 for every dtype but float64.
at::ScalarType lse_dtype(at::ScalarType dtype) { return dtype == at::kDouble ? at::kDouble : at::kFloat; }

}  // namespace

TEST_CASE("cross_entropy forward matches at::cross_entropy for every dtype",
          "[ops][cross_entropy]") {
  for (const auto dtype : kFloatingDtypes) {
    const auto tol = tolerance_for(dtype);
    for (const auto& [rows, classes] : kShapes) {
      INFO("dtype " << dtype << ", B " << rows << ", C " << classes);
      const auto s = sample(rows, classes, dtype);
      const auto [loss, lse] = kiln::ops::cross_entropy_forward(s.logits, s.target);
      REQUIRE(loss.scalar_type() == dtype);
      REQUIRE(loss.dim() == 0);
      REQUIRE(lse.scalar_type() == lse_dtype(dtype));
      KILN_REQUIRE_CLOSE(loss, reference_loss(s), tol.rtol, tol.atol);
      // lse is kept in float32 or float64 whatever the input: float32's tolerance.
      const auto lse_tol = tolerance_for(lse_dtype(dtype));
      KILN_REQUIRE_CLOSE(lse, at::logsumexp(s.logits.to(at::kDouble), 1), lse_tol.rtol, lse_tol.atol);
      KILN_REQUIRE_CLOSE(kiln::ops::cross_entropy(s.logits, s.target), loss, 0.0, 0.0);
    }
  }
}

TEST_CASE("cross_entropy is stable for large logits and empty batches", "[ops][cross_entropy]") {
  for (const auto dtype : {at::kFloat, at::kDouble}) {
    INFO("dtype " << dtype);
    const auto tol = tolerance_for(dtype);
    const auto s = sample(16, 1000, dtype, /*spread=*/1e4);  // exp would overflow unshifted
    KILN_REQUIRE_CLOSE(kiln::ops::cross_entropy(s.logits, s.target), reference_loss(s), tol.rtol,
                       tol.atol);
  }
  // −inf logits (masked classes) contribute nothing.
  auto x = at::randn({4, 40});
  x.slice(1, 20, 40).fill_(-INFINITY);
  const auto target = at::randint(0, 20, {4}, at::kLong);
  KILN_REQUIRE_CLOSE(kiln::ops::cross_entropy(x, target),
                     at::cross_entropy_loss(x.to(at::kDouble), target), 1e-5, 1e-5);
  // The mean of no rows is NaN, as in ATen.
  const auto empty = kiln::ops::cross_entropy(at::randn({0, 10}), at::zeros({0}, at::kLong));
  REQUIRE(std::isnan(empty.item<double>()));
}

TEST_CASE("every compiled CPU capability gives the same cross entropy", "[ops][cross_entropy]") {
  using namespace kiln::ops;
  for (const auto& [name, fn] : KILN_CPU_BUILDS(cross_entropy_forward)) {
    for (const auto dtype : kFloatingDtypes) {
      INFO("capability " << name << ", dtype " << dtype);
      const auto s = sample(9, 1037, dtype);
      // NaN first, so that a row the kernel does not write fails.
      auto lse = at::full({9}, NAN, lse_dtype(dtype)), nll = at::full({9}, NAN, lse_dtype(dtype));
      fn(kernel_dtype(s.logits), s.logits.const_data_ptr(), s.target.const_data_ptr<int64_t>(),
         lse.data_ptr(), nll.data_ptr(), 9, 1037);
      const auto tol = tolerance_for(lse_dtype(dtype));
      KILN_REQUIRE_CLOSE(lse, at::logsumexp(s.logits.to(at::kDouble), 1), tol.rtol, tol.atol);
      // nll[r] = lse[r] − logits[r, target[r]]: ATen's unreduced loss of each row.
      KILN_REQUIRE_CLOSE(nll,
                         at::cross_entropy_loss(s.logits.to(at::kDouble), s.target, {},
                                                at::Reduction::None),
                         tol.rtol, tol.atol);
    }
  }
}

TEST_CASE("every compiled CPU capability gives the same cross entropy gradient",
          "[ops][cross_entropy]") {
  using namespace kiln::ops;
  constexpr int64_t kRows = 9, kClasses = 1037;  // rows start at every alignment
  constexpr double kScale = 0.25;
  for (const auto& [name, fn] : KILN_CPU_BUILDS(cross_entropy_backward)) {
    for (const auto dtype : kFloatingDtypes) {
      INFO("capability " << name << ", dtype " << dtype);
      const auto s = sample(kRows, kClasses, dtype);
      const auto lse = at::logsumexp(s.logits.to(at::kDouble), 1).to(lse_dtype(dtype));
      const auto x = s.logits.to(at::kDouble);
      const auto expected = (at::softmax(x, 1) - at::one_hot(s.target, kClasses).to(at::kDouble)) * kScale;
      // NaN first, so that an element the kernel does not write fails.
      auto g = at::full({kRows, kClasses}, NAN, s.logits.options());
      fn(kernel_dtype(s.logits), s.logits.const_data_ptr(), s.target.const_data_ptr<int64_t>(),
         lse.const_data_ptr(), g.data_ptr(), kRows, kClasses, kScale);
      const auto tol = tolerance_for(dtype);
      KILN_REQUIRE_CLOSE(g, expected.to(dtype), tol.rtol, tol.atol);
    }
  }
}

TEST_CASE("cross_entropy gradient matches central differences", "[ops][cross_entropy]") {
  const auto s = sample(4, 7, at::kDouble);
  const auto c = gradcheck(
      [&](const at::Tensor& x) { return kiln::ops::cross_entropy(x, s.target); }, s.logits);
  INFO(c.report);
  REQUIRE(c.ok);
}

TEST_CASE("cross_entropy backward matches ATen's autograd for every dtype",
          "[ops][cross_entropy]") {
  for (const auto dtype : kFloatingDtypes) {
    const auto tol = tolerance_for(dtype);
    for (const auto& [rows, classes] : kShapes) {
      INFO("dtype " << dtype << ", B " << rows << ", C " << classes);
      const auto s = sample(rows, classes, dtype);
      const auto x = s.logits.clone().requires_grad_(true);
      kiln::ops::cross_entropy(x, s.target).backward(torch::tensor(2.5).to(dtype));
      REQUIRE(x.grad().scalar_type() == dtype);
      KILN_REQUIRE_CLOSE(x.grad(), reference_grad(s, 2.5), tol.rtol, tol.atol);
    }
  }
}

TEST_CASE("cross_entropy backward computes half types in float, rounding once",
          "[ops][cross_entropy]") {
  // Against ATen's float64 gradient rounded to the dtype only rare double
  // roundings may differ; arithmetic in half (x − lse, exp, ·scale rounded) differs often.
  for (const auto dtype : {at::kHalf, at::kBFloat16}) {
    const auto s = sample(20, 1000, dtype);
    const auto x = s.logits.clone().requires_grad_(true);
    kiln::ops::cross_entropy(x, s.target).backward(torch::tensor(20.0).to(dtype));
    const auto exact = reference_grad(s, 20.0).to(dtype);
    const auto mismatches = (x.grad() != exact).sum().item<int64_t>();
    INFO("dtype " << dtype << ": " << mismatches << " of 20000 differ from the rounded exact value");
    REQUIRE(mismatches <= 200);
  }
}

TEST_CASE("cross_entropy is correct on non-contiguous inputs", "[ops][cross_entropy]") {
  const auto base = at::randn({40, 30}) * 2;
  const auto target_base = at::randint(0, 15, {80}, at::kLong);
  // transposed (30, 40) logits, every other column (40, 15), a row range (20, 30);
  // every other target.
  for (const auto& x : {base.t(), base.slice(1, 0, 30, 2), base.narrow(0, 5, 20)}) {
    REQUIRE_FALSE((x.is_contiguous() && x.storage_offset() == 0));
    const auto target = target_base.slice(0, 0, 2 * x.size(0), 2);
    REQUIRE_FALSE(target.is_contiguous());
    const Sample s{x, target};
    KILN_REQUIRE_CLOSE(kiln::ops::cross_entropy(x, target), reference_loss(s), 1e-5, 1e-5);
    const auto xg = x.clone().requires_grad_(true);
    kiln::ops::cross_entropy(xg, target).backward();
    KILN_REQUIRE_CLOSE(xg.grad(), reference_grad(s, 1.0), 1e-5, 1e-5);
  }
}

TEST_CASE("cross_entropy rejects bad input with a message naming the argument",
          "[ops][cross_entropy]") {
  const auto x = at::randn({4, 10});
  REQUIRE_THROWS_WITH(kiln::ops::cross_entropy(x, torch::tensor({1, 2, 10, 3}, at::kLong)),
                      Catch::Contains("kiln::cross_entropy_forward: target: expected class "
                                      "indices in [0, 10), got target[2] = 10"));
  REQUIRE_THROWS_WITH(kiln::ops::cross_entropy(x, torch::tensor({1, -1, 10, 3}, at::kLong)),
                      Catch::Contains("got target[1] = -1"));
  REQUIRE_THROWS_WITH(
      kiln::ops::cross_entropy(at::randn({3, 50000}), torch::tensor({0, 49999, 50000}, at::kLong)),
      Catch::Contains("in [0, 50000), got target[2] = 50000"));
  REQUIRE_THROWS_WITH(kiln::ops::cross_entropy(x.to(at::kInt), at::zeros({4}, at::kLong)),
                      Catch::Contains("kiln::cross_entropy_forward: logits: expected a "
                                      "floating-point tensor") &&
                          Catch::Contains("Int"));
  REQUIRE_THROWS_WITH(kiln::ops::cross_entropy(at::randn({40}), at::zeros({4}, at::kLong)),
                      Catch::Contains("logits: expected a 2-D tensor (B, C), got shape [40]"));
  REQUIRE_THROWS_WITH(kiln::ops::cross_entropy(x, at::zeros({4}, at::kInt)),
                      Catch::Contains("target: expected dtype Long (int64 class indices), got Int"));
  REQUIRE_THROWS_WITH(kiln::ops::cross_entropy(x, at::zeros({5}, at::kLong)),
                      Catch::Contains("target: expected shape [4] (one class per row of logits), "
                                      "got [5]"));
  const auto target = at::zeros({4}, at::kLong);
  const auto lse = at::zeros({4});
  const auto g = torch::tensor(1.0f);
  REQUIRE_THROWS_WITH(kiln::ops::cross_entropy_backward(g, x, target, at::zeros({3})),
                      Catch::Contains("kiln::cross_entropy_backward: lse: expected shape [4]"));
  REQUIRE_THROWS_WITH(
      kiln::ops::cross_entropy_backward(g, x, target, at::zeros({4}, at::kDouble)),
      Catch::Contains("kiln::cross_entropy_backward: lse: expected dtype Float"));
  REQUIRE_THROWS_WITH(kiln::ops::cross_entropy_backward(at::ones({2}), x, target, lse),
                      Catch::Contains("kiln::cross_entropy_backward: grad: expected one element"));
  REQUIRE_THROWS_WITH(
      kiln::ops::cross_entropy_backward(g, x, torch::tensor({0, 0, 11, 0}, at::kLong), lse),
      Catch::Contains("kiln::cross_entropy_backward: target: expected class indices in [0, 10), "
                      "got target[2] = 11"));
}

TEST_CASE("cross_entropy on CUDA matches CPU for every dtype", "[ops][cross_entropy][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  const auto f = [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
    const auto [loss, lse] = kiln::ops::cross_entropy_forward(in[0], in[1]);
    const auto g = torch::tensor(1.7).to(in[0].options());
    return {loss, lse, kiln::ops::cross_entropy_backward(g, in[0], in[1], lse)};
  };
  for (const auto dtype : kFloatingDtypes) {
    // Warp-per-row (C ≤ 1024) and block-per-row kernels.
    for (const auto& [rows, classes] :
         std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {37, 10}, {64, 1000}, {9, 1025}, {5, 50000}}) {
      INFO("dtype " << dtype << ", B " << rows << ", C " << classes);
      const auto s = sample(rows, classes, dtype);
      kiln::test::require_cuda_matches_cpu(f, {s.logits, s.target}, tolerance_for(dtype));
    }
  }
  // Autograd end to end.
  const auto s = sample(8, 300, at::kFloat);
  const auto x = s.logits.cuda().requires_grad_(true);
  kiln::ops::cross_entropy(x, s.target.cuda()).backward();
  KILN_REQUIRE_CLOSE(x.grad().cpu(), reference_grad(s, 1.0), 1e-5, 1e-5);
}

// On CUDA the class indices are checked on the device, inside kiln's kernels (a step
// makes no host sync and no extra launch for it), so an index out of range stops the
// process at the next synchronisation with the op's message, row and index, as
// PyTorch's own nll_loss does. A device-side
// assertion leaves the process's CUDA context unusable, so this hidden case runs in a
// child process of the next one.
TEST_CASE("cross_entropy CUDA class check child", "[.][cuda_assert]") {
  const auto x = torch::randn({8, 300}, torch::kCUDA);
  const auto loss = kiln::ops::cross_entropy(x, torch::tensor({0, 1, 2, 3, 4, 5, 300, 7}).cuda());
  torch::cuda::synchronize();  // throws: the assertion fired
  std::puts("no assertion fired");
}

TEST_CASE("cross_entropy on CUDA stops at a class index out of range, with its message",
          "[ops][cross_entropy][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  std::string output;
  const int status = kiln::test::run_self({"cross_entropy CUDA class check child"}, output);
  INFO(output);
  REQUIRE(status != 0);
  REQUIRE(output.find("no assertion fired") == std::string::npos);
  REQUIRE(output.find("kiln::cross_entropy_forward: target: expected class indices in [0, 300), "
                      "got target[6] = 300") != std::string::npos);
}

TEST_CASE("cross_entropy with CPU logits and a CUDA target names the argument on the wrong device",
          "[ops][cross_entropy][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  // The CUDA kernel is chosen by the target; it must check before it guards the device.
  const auto s = sample(4, 7, at::kFloat);
  REQUIRE_THROWS_WITH(kiln::ops::cross_entropy(s.logits, s.target.cuda()),
                      Catch::Contains("kiln::cross_entropy_forward: target: expected device cpu "
                                      "(the device of logits), got cuda:0"));
  const auto lse = std::get<1>(kiln::ops::cross_entropy_forward(s.logits, s.target));
  REQUIRE_THROWS_WITH(
      kiln::ops::cross_entropy_backward(torch::tensor(1.0f), s.logits, s.target, lse.cuda()),
      Catch::Contains("kiln::cross_entropy_backward: lse: expected device cpu"));
}

TEST_CASE("cross_entropy under autocast runs in float32 and returns a float32 loss",
          "[ops][cross_entropy][autocast]") {
  const auto s = sample(6, 50, at::kFloat);
  for (const auto dtype : {at::kBFloat16, at::kHalf}) {
    INFO("logits " << dtype);
    const auto xb = s.logits.to(dtype).requires_grad_(true);
    const auto xf = s.logits.clone().requires_grad_(true);
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, dtype);
    const auto loss_f = kiln::ops::cross_entropy(xf, s.target);
    const auto loss_b = kiln::ops::cross_entropy(xb, s.target);
    const auto forward_b = kiln::ops::cross_entropy_forward(xb, s.target);
    at::autocast::set_autocast_enabled(at::kCPU, false);
    at::autocast::clear_cache();
    REQUIRE(loss_f.scalar_type() == at::kFloat);
    REQUIRE(loss_b.scalar_type() == at::kFloat);
    REQUIRE(std::get<0>(forward_b).scalar_type() == at::kFloat);
    KILN_REQUIRE_CLOSE(loss_f, reference_loss(s), 1e-5, 1e-5);
    // The float32 loss of the rounded logits, exactly as computed outside autocast.
    KILN_REQUIRE_CLOSE(loss_b, kiln::ops::cross_entropy(xb.detach().to(at::kFloat), s.target), 0, 0);
    // A gradient of 2^16 (GradScaler's first scale) must reach the logits finite:
    // past float16's largest value (65504) only when the loss is float16.
    (65536.0 * loss_b + loss_f).backward();
    REQUIRE(xb.grad().scalar_type() == dtype);
    REQUIRE(xb.grad().isfinite().all().item<bool>());
    const auto tol = tolerance_for(dtype);
    KILN_REQUIRE_CLOSE(xb.grad().to(at::kFloat) / 65536.0,
                       reference_grad({xb.detach(), s.target}, 1.0).to(at::kFloat), tol.rtol, tol.atol);
    KILN_REQUIRE_CLOSE(xf.grad(), reference_grad(s, 1.0), 1e-5, 1e-5);
  }
}

TEST_CASE("cross_entropy works without grad and in inference mode", "[ops][cross_entropy]") {
  const auto s = sample(5, 12, at::kFloat);
  const auto x = s.logits.clone().requires_grad_(true);
  at::Tensor a, b;
  {
    const torch::NoGradGuard no_grad;
    a = kiln::ops::cross_entropy(x, s.target);
  }
  {
    const c10::InferenceMode inference;
    b = kiln::ops::cross_entropy(s.logits, s.target);
  }
  REQUIRE_FALSE(a.requires_grad());
  KILN_REQUIRE_CLOSE(a, reference_loss(s), 1e-5, 1e-5);
  KILN_REQUIRE_CLOSE(b, reference_loss(s), 1e-5, 1e-5);
}
