// kiln::fused_lion_ against a plain-ATen Lion step (kiln::optim::Lion's arithmetic
// before it was fused) computed in float64: every dtype, awkward sizes, layouts
// unlike the parameter, CUDA against CPU, the sign of 0, and errors for bad lists.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "cpu_builds.h"
#include "fused_step_support.h"
#include "ops/lion/lion_kernel.h"
#include "ops/ops.h"

namespace {

using kiln::test::TensorLists;

// A small lr: where β1·m + (1−β1)·g is within a rounding of 0 a half type's sign may
// differ from float64's, which then moves p by 2·lr; at 1e-4 that stays inside half's
// tolerance, and float32 and float64 flip no sign here.
constexpr double kLr = 1e-4, kBeta1 = 0.9, kBeta2 = 0.99, kWeightDecay = 0.1;

void fused(TensorLists& l) { kiln::ops::fused_lion_(l[0], l[1], l[2], kLr, kBeta1, kBeta2, kWeightDecay); }

void reference(TensorLists& l, size_t i) {
  auto &p = l[0][i], &g = l[1][i], &m = l[2][i];
  const auto update = m.mul(kBeta1).add_(g, 1 - kBeta1).sign_();
  p.mul_(1 - kLr * kWeightDecay).add_(update, -kLr);
  m.mul_(kBeta2).add_(g, 1 - kBeta2);
}

}  // namespace

TEST_CASE("fused_lion_ matches a float64 Lion step in every dtype, over many tensors of odd sizes",
          "[ops][lion]") {
  kiln::test::require_matches_float64(fused, reference, 3);
}

TEST_CASE("fused_lion_ updates tensors that are transposed, sliced or laid out unlike their parameter",
          "[ops][lion]") {
  kiln::test::require_layouts_work(fused, reference, 3);
}

TEST_CASE("fused_lion_ on CUDA matches the CPU kernel, over more tensors than one launch takes",
          "[ops][lion][cuda]") {
  kiln::test::require_cuda_matches_cpu_step(fused, 3);
}

TEST_CASE("fused_lion_ takes sign 0 where the interpolated momentum is 0, as ATen's sign", "[ops][lion]") {
  // m = g = 0: no step but the decay; m = −g·(1−β1)/β1 exactly (β1 = 0.5): c = 0 too.
  TensorLists l{{at::ones({3})}, {at::tensor({0.0f, 2.0f, -4.0f})}, {at::tensor({0.0f, -2.0f, 4.0f})}};
  kiln::ops::fused_lion_(l[0], l[1], l[2], 0.5, 0.5, 0.0, 0.0);
  REQUIRE(at::equal(l[0][0], at::ones({3})));
  // A NaN gradient: ATen's sign gives 0, so does the kernel; the NaN stays in the moment.
  TensorLists n{{at::ones({2})}, {at::tensor({NAN, 1.0f})}, {at::zeros({2})}};
  kiln::ops::fused_lion_(n[0], n[1], n[2], 0.5, 0.9, 0.9, 0.0);
  REQUIRE(n[0][0][0].item<float>() == 1.0f);
  REQUIRE(n[0][0][1].item<float>() == 0.5f);
  REQUIRE(std::isnan(n[2][0][0].item<float>()));
}

TEST_CASE("fused_lion_ names the list, the index and the mismatch of bad arguments", "[ops][lion]") {
  at::manual_seed(5);
  auto l = kiln::test::random_lists({4, 6}, at::kFloat, 3);
  const auto call = [](TensorLists x, double beta2 = kBeta2) {
    kiln::ops::fused_lion_(x[0], x[1], x[2], kLr, kBeta1, beta2, 0.0);
  };
  auto short_grads = l;
  short_grads[1].pop_back();
  REQUIRE_THROWS_WITH(call(short_grads),
                      Catch::Contains("kiln::fused_lion_: expected lists of one length, got 2 params, "
                                      "1 grads and 2 exp_avgs"));
  auto bad_shape = l;
  bad_shape[2][1] = at::zeros({5});
  REQUIRE_THROWS_WITH(call(bad_shape), Catch::Contains("exp_avgs[1]: expected shape [6]") &&
                                           Catch::Contains("got [5]"));
  REQUIRE_THROWS_WITH(call(l, 1.0), Catch::Contains("beta2: expected in [0, 1), got 1"));
  auto leaf = kiln::test::map_lists(l, [](const at::Tensor& t) { return t.clone(); });
  leaf[0][0].requires_grad_(true);
  c10::AutoGradMode grad_on(true);
  REQUIRE_THROWS_WITH(call(leaf), Catch::Contains("params[0] requires grad") &&
                                      Catch::Contains("NoGradGuard"));
}

TEST_CASE("fused_lion_'s CPU kernel gives the same bits with its software prefetch as without, in every build",
          "[ops][lion]") {
  kiln::test::require_prefetch_changes_no_bit(KILN_CPU_BUILDS(lion_update),
                                              kiln::ops::lion_coefficients(0.1, 0.9, 0.99, 0.1), 3);
}
