// util/denormals.h: within a FlushDenormals scope the calling thread and every thread
// of ATen's pool flush float denormals (an op spread over the pool reads and makes
// zeros where it made denormals before); each thread's mode comes back after it.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cfloat>

#include "support.h"
#include "util/denormals.h"

namespace {

// Denormal results of a product that ATen's pool computes in parallel (2^18 elements,
// 8 of its grains: each thread computes a part, so one thread that does not flush
// leaves its part nonzero), and denormal inputs read as such. (at::parallel_for here
// would run serially: this file is not compiled with OpenMP, the library is.)
int64_t denormals_made() {
  const auto x = at::full({1 << 18}, FLT_MIN, at::kFloat);
  const auto made = x.mul(0.25f);  // 2^-128: a denormal, or 0 flushed
  const auto read = at::full({1 << 18}, FLT_MIN / 4, at::kFloat).mul(4.0f);  // FLT_MIN, or 0 with DAZ
  return made.ne(0).sum().item<int64_t>() + read.ne(0).sum().item<int64_t>();
}

}  // namespace

TEST_CASE("FlushDenormals flushes on every pool thread while it lives, then restores", "[util][denormals]") {
  const int threads = at::get_num_threads();
  at::set_num_threads(2);  // a pool of more than the calling thread, on any machine
  REQUIRE_FALSE(kiln::util::flushes_denormals());
  REQUIRE(denormals_made() == 2 << 18);
  {
    const kiln::util::FlushDenormals flush(true);
    CHECK(kiln::util::flushes_denormals());
    CHECK(denormals_made() == 0);
    {
      const kiln::util::FlushDenormals again(true);  // nested: the outer mode comes back
      CHECK(denormals_made() == 0);
    }
    CHECK(denormals_made() == 0);
  }
  CHECK_FALSE(kiln::util::flushes_denormals());
  CHECK(denormals_made() == 2 << 18);
  {
    const kiln::util::FlushDenormals off(false);  // changes nothing
    CHECK_FALSE(kiln::util::flushes_denormals());
    CHECK(denormals_made() == 2 << 18);
  }
  at::set_num_threads(threads);
}
