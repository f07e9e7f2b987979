// kiln::relu: forward against ATen for every dtype and every CPU capability
// build, gradients against central differences (first and second order),
// CUDA against CPU, non-contiguous inputs and bad input.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "ops/cpu_capability.h"
#include "ops/cpu_memory.h"
#include "ops/op_support.h"
#include "ops/ops.h"
#include "ops/relu/relu_kernel.h"
#include "cpu_builds.h"
#include "support.h"

using kiln::test::gradcheck;

namespace {

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};

// Sizes around the vector widths and the parallel grain, an empty one, one past
// every L2 in every dtype with a ragged end, and one whose forward moves at least
// the streaming threshold's bytes in float32 (streaming stores, cpu_memory.h).
const std::vector<int64_t> kSizes = {0, 1, 7, 16, 33, 1000, 70001, (1 << 21) + 37,
                                     kiln::ops::streaming_threshold_bytes() / 8 + 37};

at::Tensor sample(int64_t n, at::ScalarType dtype) {
  auto x = at::randn({n}, at::TensorOptions().dtype(at::kFloat));
  if (n > 3) x[3] = 0.0;  // the kink itself
  return x.to(dtype);
}

}  // namespace

TEST_CASE("relu forward matches at::relu for every dtype", "[ops][relu]") {
  for (const auto dtype : kDtypes) {
    for (const int64_t n : kSizes) {
      INFO("dtype " << dtype << ", n " << n);
      const auto x = sample(n, dtype);
      const auto y = kiln::ops::relu(x);
      REQUIRE(y.scalar_type() == dtype);
      KILN_REQUIRE_CLOSE(y, at::relu(x), 0.0, 0.0);  // exact: relu only selects
    }
  }
}

TEST_CASE("relu_backward is grad where y > 0, else 0, for every dtype", "[ops][relu]") {
  for (const auto dtype : kDtypes) {
    for (const int64_t n : kSizes) {
      INFO("dtype " << dtype << ", n " << n);
      const auto y = at::relu(sample(n, dtype)), g = at::randn({n}).to(dtype);
      KILN_REQUIRE_CLOSE(kiln::ops::relu_backward(g, y), at::threshold_backward(g, y, 0), 0.0, 0.0);
    }
  }
}

TEST_CASE("relu propagates NaN and keeps infinities like at::relu", "[ops][relu]") {
  const auto x = torch::tensor({NAN, INFINITY, -INFINITY, -1.0f, 2.0f});
  KILN_REQUIRE_CLOSE(kiln::ops::relu(x), at::relu(x), 0.0, 0.0);
}

TEST_CASE("every compiled CPU capability gives the same result", "[ops][relu]") {
  using namespace kiln::ops;
  for (const auto& [name, fn] : KILN_CPU_BUILDS(relu_forward)) {
    for (const auto dtype : kDtypes) {
      for (const auto stores : {Stores::kCached, Stores::kStreaming}) {
        // An output 0 or 3 elements past an aligned address: the streaming path's
        // head before the first aligned vector, its body and its tail.
        for (const int64_t offset : {0, 3}) {
          INFO("capability " << name << ", dtype " << dtype << ", streaming "
                             << (stores == Stores::kStreaming) << ", offset " << offset);
          const auto x = sample(1037, dtype);
          auto y = at::empty({1037 + offset}, x.options()).narrow(0, offset, 1037);
          fn(kernel_dtype(x), x.const_data_ptr(), y.data_ptr(), x.numel(), stores);
          KILN_REQUIRE_CLOSE(y, at::relu(x), 0.0, 0.0);
        }
      }
    }
  }
}

TEST_CASE("the backward kernels of every CPU capability agree with either stores",
          "[ops][relu]") {
  using namespace kiln::ops;
  for (const auto& [name, fn] : KILN_CPU_BUILDS(relu_backward)) {
    for (const auto dtype : kDtypes) {
      for (const auto stores : {Stores::kCached, Stores::kStreaming}) {
        for (const int64_t offset : {0, 5}) {
          INFO("capability " << name << ", dtype " << dtype << ", streaming "
                             << (stores == Stores::kStreaming) << ", offset " << offset);
          const auto y = at::relu(sample(2053, dtype)), g = at::randn({2053}).to(dtype);
          auto gx = at::empty({2053 + offset}, y.options()).narrow(0, offset, 2053);
          fn(kernel_dtype(y), g.const_data_ptr(), y.const_data_ptr(), gx.data_ptr(), y.numel(), stores);
          KILN_REQUIRE_CLOSE(gx, at::threshold_backward(g, y, 0), 0.0, 0.0);
        }
      }
    }
  }
}

TEST_CASE("an op streams its output when it moves at least the streaming threshold",
          "[ops][relu]") {
  using kiln::ops::Stores;
  using kiln::ops::streaming_stores;
  using kiln::ops::streaming_threshold_for;
  const int64_t llc = kiln::ops::llc_bytes(), threshold = kiln::ops::streaming_threshold_bytes();
  REQUIRE(llc > 0);
  REQUIRE((threshold > 0 && threshold <= llc));
  // The last-level cache, but on Intel's CPUs at most 128 MiB (a guest sees the
  // server's whole L3 and shares it).
  constexpr int64_t kMiB = int64_t{1} << 20;
  CHECK(streaming_threshold_for("GenuineIntel", 260 * kMiB) == 128 * kMiB);
  CHECK(streaming_threshold_for("GenuineIntel", 30 * kMiB) == 30 * kMiB);
  CHECK(streaming_threshold_for("AuthenticAMD", 256 * kMiB) == 256 * kMiB);
  CHECK(streaming_threshold_for("AuthenticAMD", 32 * kMiB) == 32 * kMiB);
  CHECK(streaming_threshold_for("", 32 * kMiB) == 32 * kMiB);
  const char* env = std::getenv("KILN_STREAMING_STORES");
  if (env == nullptr || std::string(env) == "auto") {
    CHECK(streaming_stores(threshold) == Stores::kStreaming);
    CHECK(streaming_stores(threshold - 1) == Stores::kCached);
    CHECK(streaming_stores(0) == Stores::kCached);
  }
}

TEST_CASE("relu gradient matches central differences", "[ops][relu]") {
  // Points away from 0, where relu is differentiable.
  auto x = at::randn({4, 9}, at::kDouble);
  x = x + x.sign() * 0.1;
  const auto c = gradcheck([](const at::Tensor& t) { return kiln::ops::relu(t); }, x);
  INFO(c.report);
  REQUIRE(c.ok);
}

TEST_CASE("relu backward is differentiable (double backward)", "[ops][relu]") {
  auto x = at::randn({5, 6}, at::kDouble);
  x = (x + x.sign() * 0.1).requires_grad_(true);
  const auto v = at::randn({5, 6}, at::kDouble);
  // g(v) = d/dx <relu(x), v>, a function of v; its gradient must be the mask.
  const auto g = [&](const at::Tensor& vv) {
    const auto y = kiln::ops::relu(x);
    return torch::autograd::grad({y}, {x}, {vv}, /*retain_graph=*/true, /*create_graph=*/true)[0];
  };
  const auto c = gradcheck(g, v);
  INFO(c.report);
  REQUIRE(c.ok);
  // Through create_graph: d/dv sum(grad) = 1[x > 0].
  const auto vv = v.clone().requires_grad_(true);
  const auto gx = torch::autograd::grad({kiln::ops::relu(x)}, {x}, {vv}, true, true)[0];
  const auto ggv = torch::autograd::grad({gx.sum()}, {vv})[0];
  KILN_REQUIRE_CLOSE(ggv, (x > 0).to(at::kDouble), 0.0, 0.0);
}

TEST_CASE("relu is correct on non-contiguous inputs", "[ops][relu]") {
  const auto base = at::randn({64, 48});
  for (const auto& x : {base.t(), base.slice(1, 0, 48, 3), base.narrow(0, 5, 20)}) {
    REQUIRE_FALSE((x.is_contiguous() && x.storage_offset() == 0));
    KILN_REQUIRE_CLOSE(kiln::ops::relu(x), at::relu(x), 0.0, 0.0);
    const auto xg = x.clone().requires_grad_(true);
    const auto g = at::randn_like(x).t().contiguous().t();  // a transposed gradient
    kiln::ops::relu(xg).backward(g);
    KILN_REQUIRE_CLOSE(xg.grad(), g * (x > 0), 0.0, 0.0);
  }
}

TEST_CASE("relu rejects bad input with a message naming the argument", "[ops][relu]") {
  REQUIRE_THROWS_WITH(kiln::ops::relu(at::ones({3}, at::kInt)),
                      Catch::Contains("kiln::relu: x: expected a floating-point tensor") &&
                          Catch::Contains("Int"));
  REQUIRE_THROWS_WITH(kiln::ops::relu_backward(at::ones({3}), at::ones({4})),
                      Catch::Contains("kiln::relu_backward: y: expected shape [3]") &&
                          Catch::Contains("got [4]"));
  REQUIRE_THROWS_WITH(kiln::ops::relu_backward(at::ones({3}), at::ones({3}, at::kDouble)),
                      Catch::Contains("kiln::relu_backward: y: expected dtype Float"));
}

TEST_CASE("relu on CUDA matches CPU for every dtype", "[ops][relu][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  for (const auto dtype : kDtypes) {
    for (const int64_t n : kSizes) {
      INFO("dtype " << dtype << ", n " << n);
      const auto x = sample(n, dtype);
      const auto xc = x.cuda().requires_grad_(true);
      const auto y = kiln::ops::relu(xc);
      KILN_REQUIRE_CLOSE(y.cpu(), kiln::ops::relu(x), 0.0, 0.0);
      const auto g = at::randn({n}).to(dtype);
      y.backward(g.cuda());
      KILN_REQUIRE_CLOSE(xc.grad().cpu(), kiln::ops::relu_backward(g, kiln::ops::relu(x)), 0.0, 0.0);
    }
    // An unaligned view takes the scalar path.
    const auto x = sample(1001, dtype).cuda().narrow(0, 1, 999);
    KILN_REQUIRE_CLOSE(kiln::ops::relu(x).cpu(), at::relu(x.cpu()), 0.0, 0.0);
  }
  // Many tiles of four packs a thread (cuda_support.cuh), a partial last tile and a
  // scalar tail, for the maps of one input (forward) and of two (backward).
  const int64_t big = (int64_t{1} << 25) + 37;
  for (const auto dtype : kDtypes) {
    INFO("dtype " << dtype << ", n " << big);
    const auto x = sample(big, dtype), g = at::randn({big}).to(dtype);
    const auto y = kiln::ops::relu(x.cuda());
    KILN_REQUIRE_CLOSE(y.cpu(), at::relu(x), 0.0, 0.0);
    KILN_REQUIRE_CLOSE(kiln::ops::relu_backward(g.cuda(), y).cpu(), at::threshold_backward(g, at::relu(x), 0),
                       0.0, 0.0);
  }
}

TEST_CASE("under CPU autocast relu keeps its input's dtype", "[ops][relu][autocast]") {
  const auto x = at::randn({8, 8});
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  const auto y = kiln::ops::relu(x);
  const auto yb = kiln::ops::relu(x.to(at::kBFloat16));
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  REQUIRE(y.scalar_type() == at::kFloat);
  REQUIRE(yb.scalar_type() == at::kBFloat16);
  KILN_REQUIRE_CLOSE(y, at::relu(x), 0.0, 0.0);
}
