// kiln::cast: bit for bit ATen's cast (Tensor::to) in every direction it converts
// itself, for every CPU capability build and either stores; the other pairs and
// layouts through ATen; its gradient; its use by the autocast kernels; bad input.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cmath>

#include "ops/autocast.h"
#include "ops/cast/cast_kernel.h"
#include "ops/cpu_bf16.h"
#include "ops/op_support.h"
#include "ops/ops.h"
#include "cpu_builds.h"
#include "support.h"

namespace {

// n floats over the whole float32 range, with every special value: NaN, ±infinity,
// ±0, subnormals (which bfloat16 keeps), the largest finite value (which rounds to
// infinity in bfloat16 and float16) and halfway cases (ties to even).
at::Tensor specials(int64_t n) {
  auto x = at::randn({n}) * at::exp(at::randn({n}) * 30);
  const std::vector<float> special = {NAN,      INFINITY,    -INFINITY,    0.0f,       -0.0f,
                                      1e-39f,   -3e-42f,     1.4e-45f,     3.4028235e38f,
                                      1.00390625f /* 1 + 2^-8: a tie */,   1.01171875f,
                                      65504.0f, 65520.0f,    6e-8f,        -2.9e-8f};
  for (int64_t i = 0; i < n; ++i)
    if (i % 5 == 0) x[i] = special[static_cast<size_t>(i / 5) % special.size()];
  return x;
}

// a and b hold the same bits, but NaNs, which need only both be NaN.
void require_same_bits(const at::Tensor& a, const at::Tensor& b) {
  REQUIRE(a.scalar_type() == b.scalar_type());
  REQUIRE(a.sizes() == b.sizes());
  REQUIRE(a.strides() == b.strides());
  const auto nan = at::isnan(b);
  REQUIRE(at::equal(at::isnan(a), nan));
  const auto int_type = a.element_size() == 2 ? at::kShort : at::kInt;
  const auto differ = (a.view(int_type) != b.view(int_type)).logical_and(nan.logical_not());
  INFO("first differing element " << (differ.any().item<bool>() ? differ.nonzero()[0].item<int64_t>() : -1));
  REQUIRE_FALSE(differ.any().item<bool>());
}

const std::vector<int64_t> kSizes = {0, 1, 15, 31, 33, 1000, 70001, (1 << 21) + 37};

}  // namespace

TEST_CASE("cast matches ATen's cast bit for bit to and from bfloat16 and float16", "[ops][cast]") {
  for (const int64_t n : kSizes) {
    const auto x = specials(n);
    for (const auto half : {at::kBFloat16, at::kHalf}) {
      INFO("n " << n << ", " << half);
      const auto h = kiln::ops::cast(x, half);
      require_same_bits(h, x.to(half));
      require_same_bits(kiln::ops::cast(h, at::kFloat), h.to(at::kFloat));
    }
  }
}

TEST_CASE("every compiled CPU capability casts alike with either stores", "[ops][cast]") {
  using namespace kiln::ops;
  for (const auto& [name, fn] : KILN_CPU_BUILDS(cast_values)) {
    for (const auto stores : {Stores::kCached, Stores::kStreaming}) {
      // native: AVX512-BF16's conversion, where this CPU has it (the other builds ignore it)
      for (const bool native : {false, cpu_has_avx512_bf16()}) {
        for (const int64_t offset : {0, 3}) {
          INFO("capability " << name << ", streaming " << (stores == Stores::kStreaming) << ", native "
                             << native << ", offset " << offset);
          const auto x = specials(2085);
          for (const auto half : {at::kBFloat16, at::kHalf}) {
            auto h = at::empty({2085 + offset}, x.options().dtype(half)).narrow(0, offset, 2085);
            fn(DType::kFloat, x.const_data_ptr(), kernel_dtype(half), h.data_ptr(), x.numel(), stores, native);
            require_same_bits(h, x.to(half));
            auto back = at::empty({2085 + offset}).narrow(0, offset, 2085);
            fn(kernel_dtype(half), h.const_data_ptr(), DType::kFloat, back.data_ptr(), h.numel(), stores, native);
            require_same_bits(back, h.to(at::kFloat));
          }
        }
      }
    }
  }
}

TEST_CASE("cast keeps strides, takes any layout and leaves other pairs to ATen", "[ops][cast]") {
  const auto base = at::randn({64, 48});
  for (const auto& x : {base.t(), base.slice(1, 0, 48, 3), base.narrow(0, 5, 20), base.unsqueeze(1).expand({64, 3, 48})}) {
    for (const auto dtype : {at::kBFloat16, at::kHalf, at::kDouble, at::kFloat}) {
      INFO("sizes " << x.sizes() << ", strides " << x.strides() << ", " << dtype);
      const auto y = kiln::ops::cast(x, dtype);
      const auto ref = x.to(dtype);
      REQUIRE(y.scalar_type() == dtype);
      REQUIRE(y.sizes() == x.sizes());
      if (x.is_non_overlapping_and_dense()) REQUIRE(y.strides() == x.strides());
      REQUIRE(at::equal(y, ref));
      if (dtype == at::kFloat) REQUIRE(y.data_ptr() != x.data_ptr());  // a new tensor, as the schema says
    }
  }
  const auto d = at::randn({7}, at::kDouble);
  REQUIRE(at::equal(kiln::ops::cast(d, at::kBFloat16), d.to(at::kBFloat16)));
}

TEST_CASE("cast's gradient is the gradient cast back to the input's dtype", "[ops][cast]") {
  const auto x = at::randn({5, 70}).requires_grad_(true);
  const auto y = kiln::ops::cast(x, at::kBFloat16);
  REQUIRE(y.requires_grad());
  const auto g = at::randn({5, 70}).to(at::kBFloat16);
  y.backward(g);
  REQUIRE(x.grad().scalar_type() == at::kFloat);
  require_same_bits(x.grad(), g.to(at::kFloat));
  // Gradients of gradients: d/dv <cast(x), v> = cast(v) back, linear in v.
  const auto xd = at::randn({3, 4}, at::kDouble).requires_grad_(true);
  const auto v = at::randn({3, 4}, at::kFloat).requires_grad_(true);
  const auto gx = torch::autograd::grad({kiln::ops::cast(xd, at::kFloat)}, {xd}, {v}, true, true)[0];
  REQUIRE(gx.scalar_type() == at::kDouble);
  const auto ggv = torch::autograd::grad({gx.sum()}, {v})[0];
  REQUIRE(at::equal(ggv, at::ones({3, 4})));
  // No grad needed: no graph node.
  REQUIRE_FALSE(kiln::ops::cast(at::randn({3}), at::kHalf).requires_grad());
}

TEST_CASE("under CPU autocast kiln's linear casts its float32 weight with kiln::cast",
          "[ops][cast][autocast]") {
  const auto x = at::randn({6, 40});
  const auto w = (at::randn({24, 40}) * 0.2).requires_grad_(true), b = at::randn({24}).requires_grad_(true);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  const auto y = kiln::ops::linear(x, w, b);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  REQUIRE(y.scalar_type() == at::kBFloat16);
  // The weight's and the bias's edges lead to kiln::cast's nodes (ATen's cast would be ToCopyBackward0).
  int casts = 0;
  for (const auto& edge : y.grad_fn()->next_edges())
    if (edge.function && edge.function->name().find("CastFunction") != std::string::npos) ++casts;
  REQUIRE(casts == 2);
  // The same values and gradients as ATen's casts give.
  const auto w2 = w.detach().clone().requires_grad_(true), b2 = b.detach().clone().requires_grad_(true);
  const auto y2 = kiln::ops::linear(x.to(at::kBFloat16), w2.to(at::kBFloat16), b2.to(at::kBFloat16));
  REQUIRE(at::equal(y, y2));
  const auto g = at::randn({6, 24}).to(at::kBFloat16);
  y.backward(g);
  y2.backward(g);
  REQUIRE(w.grad().scalar_type() == at::kFloat);
  REQUIRE(at::equal(w.grad(), w2.grad()));
  REQUIRE(at::equal(b.grad(), b2.grad()));
}

TEST_CASE("cast rejects bad input with a message naming the argument", "[ops][cast]") {
  REQUIRE_THROWS_WITH(kiln::ops::cast(at::ones({3}, at::kInt), at::kFloat),
                      Catch::Contains("kiln::cast: x: expected a floating-point tensor") && Catch::Contains("Int"));
  REQUIRE_THROWS_WITH(kiln::ops::cast(at::ones({3}), at::kLong),
                      Catch::Contains("kiln::cast: dtype: expected float32, float64, float16 or bfloat16, got Long"));
}

TEST_CASE("autocast's CPU cast leaves tensors of other layouts to ATen's cast", "[ops][cast][autocast]") {
  // kiln::cast has strided kernels only; a sparse tensor must still cast as ATen's autocast would.
  const auto dense = at::randn({4, 5});
  const auto sparse = dense.to_sparse();
  const auto cast = kiln::ops::autocast::cast<c10::DeviceType::CPU>(sparse, at::kBFloat16);
  REQUIRE(cast.is_sparse());
  REQUIRE(cast.scalar_type() == at::kBFloat16);
  REQUIRE(at::equal(cast.to_dense(), dense.to(at::kBFloat16)));
  // A strided one goes through kiln::cast; an ineligible one (float64, integers) is returned as it is.
  REQUIRE(at::equal(kiln::ops::autocast::cast<c10::DeviceType::CPU>(dense, at::kBFloat16), dense.to(at::kBFloat16)));
  const auto d = at::randn({3}, at::kDouble);
  REQUIRE(kiln::ops::autocast::cast<c10::DeviceType::CPU>(d, at::kBFloat16).is_same(d));
}
