// kiln::grad_norm: the global 2-norm of many tensors against a float64 ATen
// reference for every dtype (sizes that cross the CPU's blocks and the CUDA
// chunks), its argument errors, and CUDA against CPU.
#include <ATen/ATen.h>

#include "ops/ops.h"
#include "support.h"

namespace {

std::vector<at::Tensor> tensors(at::ScalarType dtype) {
  // Empty, tiny, odd-sized and larger-than-a-block tensors, one of them a view.
  std::vector<at::Tensor> ts;
  for (const int64_t n : {0, 1, 7, 1000, 65537, 200003}) ts.push_back(at::randn({n}).to(dtype));
  ts.push_back(at::randn({300, 41}).to(dtype).t());  // non-contiguous
  return ts;
}

double reference(const std::vector<at::Tensor>& ts) {
  double s = 0;
  for (const auto& t : ts) s += t.to(at::kDouble).square().sum().item<double>();
  return std::sqrt(s);
}

}  // namespace

TEST_CASE("grad_norm matches a float64 reference over many tensors in every dtype",
          "[ops][grad_norm]") {
  at::manual_seed(6);
  for (const auto dtype : kiln::test::kFloatingDtypes) {
    const auto ts = tensors(dtype);
    const auto norm = kiln::ops::grad_norm(ts);
    INFO("dtype " << dtype);
    REQUIRE(norm.dim() == 0);
    REQUIRE(norm.scalar_type() == (dtype == at::kDouble ? at::kDouble : at::kFloat));
    const double expected = reference(ts);
    // float lanes: each of the 4 chains × W lanes adds 64K / (4·W) squares of a block
    // (2K with AVX2's 8 lanes, 1K with AVX-512's 16) before the lanes meet in double;
    // the rounding of such a sum is about √2048 · 2^-24 ≈ 3e-6 of it, half that on
    // the norm (1.9e-6 measured on an AVX2 EPYC), so 1e-5 bounds it on every build.
    CHECK(norm.item<double>() == Approx(expected).epsilon(dtype == at::kDouble ? 1e-12 : 1e-5));
  }
}

TEST_CASE("grad_norm returns a non-finite norm as is", "[ops][grad_norm]") {
  auto x = at::ones({100});
  x[3] = std::numeric_limits<float>::infinity();
  CHECK(std::isinf(kiln::ops::grad_norm({x}).item<double>()));
  x[4] = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(kiln::ops::grad_norm({x}).item<double>()));
}

TEST_CASE("grad_norm names the tensor of another dtype and refuses an empty list",
          "[ops][grad_norm]") {
  REQUIRE_THROWS_WITH(kiln::ops::grad_norm({at::ones({3}), at::ones({3}, at::kDouble)}),
                      Catch::Contains("tensors[1]: expected Float"));
  REQUIRE_THROWS_WITH(kiln::ops::grad_norm({}), Catch::Contains("expected at least one tensor"));
  REQUIRE_THROWS_WITH(kiln::ops::grad_norm({at::ones({3}, at::kLong)}),
                      Catch::Contains("expected a floating-point tensor"));
}

TEST_CASE("grad_norm on CUDA matches CPU in every dtype", "[ops][grad_norm][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  at::manual_seed(7);
  for (const auto dtype : kiln::test::kFloatingDtypes) {
    const auto ts = tensors(dtype);
    std::vector<at::Tensor> dev;
    for (const auto& t : ts) dev.push_back(t.cuda());
    const auto norm = kiln::ops::grad_norm(dev);
    INFO("dtype " << dtype);
    REQUIRE(norm.is_cuda());
    CHECK(norm.item<double>() ==
          Approx(kiln::ops::grad_norm(ts).item<double>()).epsilon(dtype == at::kDouble ? 1e-12 : 1e-5));
  }
}
