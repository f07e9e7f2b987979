// kiln::test::within_one_ulp (tests/support.h), which the gelu and bias_gelu tests
// hold CUDA's approximate half and bfloat16 maths to: what it accepts and refuses.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>

#include "support.h"

TEST_CASE("within_one_ulp accepts rounding and one unit, refuses two", "[support]") {
  for (const auto dtype : {at::kHalf, at::kBFloat16, at::kFloat}) {
    INFO("dtype " << dtype);
    const auto reference = at::cat({at::randn({10000}, at::kDouble) * 100, at::tensor({0.0, -3e-30, 1.0})});
    REQUIRE(kiln::test::within_one_ulp(reference.to(dtype), reference).ok);
    // 1.5 is exact in every dtype: one number up is one unit off, two are two.
    const auto exact = at::tensor({1.5}, at::kDouble);
    const auto up = [](const at::Tensor& t) { return at::nextafter(t, at::full_like(t, INFINITY)); };
    const auto one_up = up(exact.to(dtype));
    REQUIRE(kiln::test::within_one_ulp(one_up, exact).ok);
    const auto c = kiln::test::within_one_ulp(up(one_up), exact);
    CHECK_FALSE(c.ok);
    CHECK_THAT(c.report, Catch::Contains("2 ulp of"));
    // An absolute slack widens the allowance element by element.
    REQUIRE(kiln::test::within_one_ulp(up(one_up), exact, at::tensor({1.5 * 0.01}, at::kDouble)).ok);
    const auto tight = kiln::test::within_one_ulp(up(one_up), exact, at::tensor({0.0}, at::kDouble));
    CHECK_FALSE(tight.ok);
    CHECK_THAT(tight.report, Catch::Contains("(allowed 1 ulp + 0)"));
    // NaN where the reference is a number is the worst error.
    REQUIRE_FALSE(kiln::test::within_one_ulp(at::full({1}, NAN, dtype), exact).ok);
    // A shape mismatch fails with the shapes named.
    const auto s = kiln::test::within_one_ulp(reference.to(dtype).narrow(0, 0, 3), reference);
    CHECK_FALSE(s.ok);
    CHECK_THAT(s.report, Catch::Contains("shape"));
  }
}
