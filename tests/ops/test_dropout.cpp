// kiln::dropout: the Philox words against ATen's own engine; the output against a
// reference mask built from them, for every dtype, size and CPU capability build
// (and chunks that start inside a block); the kept fraction; NaN and inf; gradients
// (the same mask, second order too); layouts; bad input; random_dropout's seeding;
// autocast; CUDA against CPU.
#include <ATen/autocast_mode.h>
#include <ATen/core/PhiloxRNGEngine.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "cpu_builds.h"
#include "ops/dropout/dropout_args.h"
#include "ops/dropout/dropout_kernel.h"
#include "ops/dropout/philox.h"
#include "ops/op_support.h"
#include "ops/ops.h"
#include "support.h"

using kiln::test::kFloatingDtypes;
namespace philox = kiln::ops::philox;

namespace {

const std::vector<int64_t> kSizes = {0, 1, 7, 16, 63, 64, 65, 1000, 70001};
const std::vector<double> kProbabilities = {0.1, 0.5, 0.9, 1.0};

// 1 where element i (row-major) is kept, from philox.h's layout and ATen's engine.
at::Tensor reference_mask(int64_t n, uint64_t seed, double p) {
  const auto k = kiln::ops::dropout_constants("test", p);
  auto mask = at::empty({n}, at::kDouble);
  auto* m = mask.data_ptr<double>();
  for (int64_t e = 0; e < n; ++e) {
    at::Philox4_32 engine(seed, 0, philox::counter_of(e));
    uint32_t word = 0;
    for (int w = 0; w <= philox::word_of(e); ++w) word = engine();
    m[e] = word < k.keep_below ? 1.0 : 0.0;
  }
  return mask;
}

// x·mask·scale computed as the kernels compute it (float for half types), rounded once.
at::Tensor reference(const at::Tensor& x, uint64_t seed, double p) {
  const auto acc = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const auto k = kiln::ops::dropout_constants("test", p);
  const auto mult = (reference_mask(x.numel(), seed, p) * k.scale).to(acc).reshape(x.sizes());
  return (x.contiguous().to(acc) * mult).to(x.scalar_type());
}

void require_same(const at::Tensor& a, const at::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  REQUIRE(a.scalar_type() == b.scalar_type());
  // Bit for bit, NaN where the other has NaN.
  REQUIRE(at::equal(a.isnan(), b.isnan()));
  REQUIRE(at::equal(a.nan_to_num(0, 0, 0), b.nan_to_num(0, 0, 0)));
}

}  // namespace

TEST_CASE("philox::words gives at::Philox4_32's words", "[ops][dropout]") {
  for (const uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{0x123456789abcdefULL}, ~uint64_t{0}}) {
    for (const uint64_t counter : {uint64_t{0}, uint64_t{5}, uint64_t{0xffffffffULL}, uint64_t{0x100000003ULL}}) {
      INFO("seed " << seed << ", counter " << counter);
      at::Philox4_32 engine(seed, 0, counter);
      const auto w = philox::words(seed, counter);
      for (int k = 0; k < 4; ++k) REQUIRE(w.v[k] == engine());
    }
  }
  REQUIRE(philox::counter_of(70) == 22);
  REQUIRE(philox::word_of(70) == 0);
  REQUIRE(philox::word_of(64 + 48 + 3) == 3);
}

TEST_CASE("dropout keeps the elements its Philox words say, for every dtype and size", "[ops][dropout]") {
  for (const auto dtype : kFloatingDtypes) {
    for (const double p : kProbabilities) {
      for (const int64_t n : kSizes) {
        INFO("dtype " << dtype << ", p " << p << ", n " << n);
        const auto x = at::randn({n}).to(dtype);
        const int64_t seed = static_cast<int64_t>(n * 7919 + 13);
        require_same(kiln::ops::dropout(x, p, seed), reference(x, static_cast<uint64_t>(seed), p));
      }
    }
  }
  // A negative seed is its 64-bit pattern.
  const auto x = at::randn({300});
  require_same(kiln::ops::dropout(x, 0.3, -5), reference(x, static_cast<uint64_t>(int64_t{-5}), 0.3));
  // p = 0 keeps everything unchanged, in a new tensor.
  const auto y = kiln::ops::dropout(x, 0.0, 1);
  REQUIRE(at::equal(y, x));
  REQUIRE(y.data_ptr() != x.data_ptr());
}

TEST_CASE("every CPU build of dropout gives the same bits, chunks starting anywhere", "[ops][dropout]") {
  const int64_t n = 1000;
  for (const auto dtype : kFloatingDtypes) {
    const auto x = at::randn({n}).to(dtype);
    const auto expected = reference(x, 99, 0.35);
    const auto k = kiln::ops::dropout_constants("test", 0.35);
    for (const auto& [name, kernel] : KILN_CPU_BUILDS(dropout)) {
      for (const auto stores : {kiln::ops::Stores::kCached, kiln::ops::Stores::kStreaming}) {
        INFO("build " << name << ", dtype " << dtype << ", streaming " << (stores == kiln::ops::Stores::kStreaming));
        auto y = at::full({n}, 7.0).to(dtype);
        // Chunks of odd sizes: starting inside blocks, ending inside blocks, and a whole one.
        for (const auto& [first, count] : std::vector<std::pair<int64_t, int64_t>>{
                 {0, 37}, {37, 27}, {64, 64}, {128, 500}, {628, 1}, {629, 371}}) {
          kernel(kiln::ops::kernel_dtype(x), kiln::ops::elem_ptr(x, first), kiln::ops::elem_ptr(y, first), first,
                 count, 99, k.keep_below, k.scale, stores);
        }
        require_same(y, expected);
      }
    }
  }
}

TEST_CASE("dropout keeps 1 - p of the elements and their mean", "[ops][dropout]") {
  const int64_t n = 1 << 20;
  const auto x = at::ones({n});
  for (const double p : {0.1, 0.5, 0.8}) {
    INFO("p " << p);
    const auto y = kiln::ops::dropout(x, p, 2024);
    const double kept = y.ne(0).sum().item<double>() / n;
    const double sigma = std::sqrt(p * (1 - p) / n);
    REQUIRE(std::abs(kept - (1 - p)) < 5 * sigma);
    REQUIRE(std::abs(y.mean().item<double>() - 1.0) < 5 * sigma / (1 - p));
    // Kept elements are exactly 1/(1 − p) (in float).
    const auto kept_values = y.masked_select(y.ne(0));
    const float scale = static_cast<float>(1.0 / (1 - p));
    REQUIRE(kept_values.min().item<float>() == scale);
    REQUIRE(kept_values.max().item<float>() == scale);
  }
  // Seeds and neighbouring blocks give unrelated masks: two seeds agree on about
  // p² + (1 − p)² of the elements, not on all.
  const auto a = kiln::ops::dropout(x, 0.5, 1).ne(0), b = kiln::ops::dropout(x, 0.5, 2).ne(0);
  const double agree = a.eq(b).sum().item<double>() / n;
  REQUIRE(std::abs(agree - 0.5) < 0.005);
}

TEST_CASE("a dropped NaN or inf stays NaN, as x·0; a kept one passes", "[ops][dropout]") {
  const double inf = std::numeric_limits<double>::infinity();
  const auto x = at::full({4096}, std::nan("")).index_put_({at::indexing::Slice(0, 2048)}, inf);
  const auto y = kiln::ops::dropout(x, 0.5, 3);
  const auto kept = reference_mask(4096, 3, 0.5).to(at::kBool);
  REQUIRE(y.isnan().masked_select(kept.logical_not()).all().item<bool>());
  REQUIRE(y.slice(0, 0, 2048).masked_select(kept.slice(0, 0, 2048)).isinf().all().item<bool>());
}

TEST_CASE("dropout's gradient drops the same elements, to the second order", "[ops][dropout]") {
  for (const auto dtype : kFloatingDtypes) {
    INFO("dtype " << dtype);
    const auto x = at::randn({5, 77}).to(dtype).requires_grad_(true);
    const auto y = kiln::ops::dropout(x, 0.4, 11);
    const auto g = at::randn({5, 77}).to(dtype);
    y.backward(g);
    require_same(x.grad(), reference(g, 11, 0.4));
    // Where y is x·scale, the gradient is g·scale; where y is 0, it is 0.
    REQUIRE(at::equal(x.grad().eq(0), y.detach().eq(0)));
  }
  // Double backward: d/dg of <dropout'(g), v> is dropout(v); gradcheck in float64.
  const auto x = at::randn({3, 40}, at::kDouble).requires_grad_(true);
  const auto g = at::randn({3, 40}, at::kDouble).requires_grad_(true);
  const auto y = kiln::ops::dropout(x, 0.3, 5);
  const auto gx = torch::autograd::grad({y}, {x}, {g}, true, true)[0];
  const auto v = at::randn({3, 40}, at::kDouble);
  const auto gg = torch::autograd::grad({gx}, {g}, {v})[0];
  require_same(gg, reference(v, 5, 0.3));
  const auto r = kiln::test::gradcheck([](const at::Tensor& t) { return kiln::ops::dropout(t, 0.3, 5); },
                                       at::randn({4, 33}, at::kDouble));
  INFO(r.report);
  REQUIRE(r.ok);
}

TEST_CASE("dropout follows the row-major index whatever the layout", "[ops][dropout]") {
  const auto x = at::randn({40, 30});
  const auto xt = x.t();  // a transposed view: its row-major order is not memory order
  const auto y = kiln::ops::dropout(xt, 0.5, 8);
  REQUIRE(y.is_contiguous());
  require_same(y, kiln::ops::dropout(xt.contiguous(), 0.5, 8));
  // The gradient of a transposed input comes back in the same mask.
  const auto leaf = x.clone().requires_grad_(true);
  kiln::ops::dropout(leaf.t(), 0.5, 8).backward(at::ones({30, 40}));
  require_same(leaf.grad().t(), kiln::ops::dropout(at::ones({30, 40}), 0.5, 8));
}

TEST_CASE("dropout rejects bad input with a message naming the argument", "[ops][dropout]") {
  REQUIRE_THROWS_WITH(kiln::ops::dropout(at::ones({3}), -0.1, 1),
                      Catch::Contains("kiln::dropout: p: expected a probability in [0, 1], got -0.1"));
  REQUIRE_THROWS_WITH(kiln::ops::dropout(at::ones({3}), 1.5, 1),
                      Catch::Contains("kiln::dropout: p: expected a probability in [0, 1], got 1.5"));
  REQUIRE_THROWS_WITH(kiln::ops::dropout(at::ones({3}), std::nan(""), 1),
                      Catch::Contains("kiln::dropout: p: expected a probability in [0, 1], got nan"));
  REQUIRE_THROWS_WITH(kiln::ops::dropout(at::ones({3}, at::kInt), 0.5, 1),
                      Catch::Contains("kiln::dropout: x: expected a floating-point tensor") &&
                          Catch::Contains("Int"));
}

TEST_CASE("random_dropout draws its seed from the default CPU generator", "[ops][dropout]") {
  const auto x = at::randn({1000});
  torch::manual_seed(42);
  const auto a = kiln::ops::random_dropout(x, 0.5, true);
  const auto b = kiln::ops::random_dropout(x, 0.5, true);
  torch::manual_seed(42);
  const auto a2 = kiln::ops::random_dropout(x, 0.5, true);
  REQUIRE(at::equal(a, a2));       // manual_seed fixes the mask
  REQUIRE_FALSE(at::equal(a, b));  // each call draws a new one
  // Not training, or p = 0: x itself, no draw.
  const auto state = at::detail::getDefaultCPUGenerator().get_state();
  REQUIRE(kiln::ops::random_dropout(x, 0.5, false).is_same(x));
  REQUIRE(kiln::ops::random_dropout(x, 0.0, true).is_same(x));
  REQUIRE(at::equal(at::detail::getDefaultCPUGenerator().get_state(), state));
}

TEST_CASE("under CPU autocast dropout keeps its input's dtype", "[ops][dropout][autocast]") {
  const auto x = at::randn({8, 8});
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  const auto y = kiln::ops::dropout(x, 0.5, 4);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  REQUIRE(y.scalar_type() == at::kFloat);
  require_same(y, reference(x, 4, 0.5));
}

TEST_CASE("dropout on CUDA drops the elements the CPU drops", "[ops][dropout][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  for (const auto dtype : kFloatingDtypes) {
    for (const int64_t n : kSizes) {
      INFO("dtype " << dtype << ", n " << n);
      const auto x = at::randn({n}).to(dtype);
      const auto cpu = kiln::ops::dropout(x, 0.3, 77);
      require_same(kiln::ops::dropout(x.cuda(), 0.3, 77).cpu(), cpu);
    }
  }
  const auto x = at::randn({3000}).cuda().requires_grad_(true);
  kiln::ops::dropout(x, 0.2, 6).sum().backward();
  require_same(x.grad().cpu(), kiln::ops::dropout(at::ones({3000}), 0.2, 6));
}
