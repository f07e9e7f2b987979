// kiln::max_pool2 against ATen's max_pool2d(x, 2): the output and the gradient, equal
// element for element (a max-pool only picks values), for channels-last and contiguous
// images with odd and even sides, channel counts past and short of a vector, three
// dtypes, values with ties (the first position wins) and NaNs (the last NaN wins, as in
// ATen); every CPU build's kernels; autograd, meta and bad input.
#include <ATen/ops/max_pool2d.h>
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <vector>

#include "cpu_builds.h"
#include "ops/max_pool2/max_pool2_kernel.h"
#include "ops/ops.h"
#include "support.h"

namespace {

using Catch::Matchers::Contains;

const std::vector<std::vector<int64_t>> kShapes = {{2, 3, 4, 4}, {3, 17, 5, 7}, {2, 40, 6, 3}, {1, 1, 2, 2},
                                                   {4, 32, 28, 28}};

// ATen's output and gradient for x and the upstream gradient g.
std::pair<at::Tensor, at::Tensor> aten_pool(const at::Tensor& x, const at::Tensor& g) {
  auto xa = x.detach().clone().requires_grad_(true);
  const auto y = at::max_pool2d(xa, {2, 2});
  y.backward(g);
  return {y.detach(), xa.grad()};
}

bool same(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && at::allclose(a.to(at::kFloat), b.to(at::kFloat), 0.0, 0.0, /*equal_nan=*/true);
}

at::Tensor sample(const std::vector<int64_t>& shape, at::ScalarType dtype, bool ties, at::MemoryFormat format) {
  auto x = ties ? at::randint(0, 3, shape).to(at::kFloat) : at::randn(shape);
  if (!ties) {  // a NaN in a few windows, two in one of them
    auto flat = x.view({-1});
    for (const int64_t i : {int64_t{0}, int64_t{5}, x.size(3)}) flat[i % flat.numel()] = NAN;
  }
  return x.to(dtype).contiguous(format);
}

}  // namespace

TEST_CASE("max_pool2 matches ATen's max_pool2d(x, 2), values and gradients", "[ops][max_pool2]") {
  for (const auto& shape : kShapes)
    for (const auto format : {at::MemoryFormat::ChannelsLast, at::MemoryFormat::Contiguous})
      for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf})
        for (const bool ties : {true, false}) {
          INFO("shape " << at::IntArrayRef(shape) << ", " << format << ", " << dtype << ", ties " << ties);
          at::manual_seed(shape[1]);
          const auto x = sample(shape, dtype, ties, format);
          const std::vector<int64_t> out = {shape[0], shape[1], shape[2] / 2, shape[3] / 2};
          const auto g = at::randn(out).to(dtype).contiguous(format);
          const auto [ya, dxa] = aten_pool(x, g);
          auto xk = x.detach().clone().requires_grad_(true);
          const auto y = kiln::ops::max_pool2(xk);
          CHECK(y.is_contiguous(format));
          REQUIRE(same(y, ya));
          y.backward(g);
          CHECK(xk.grad().is_contiguous(format));
          REQUIRE(same(xk.grad(), dxa));
        }
}

TEST_CASE("max_pool2: every CPU build's kernels give the op's results", "[ops][max_pool2]") {
  for (const auto& shape : kShapes)
    for (const bool cl : {true, false}) {
      INFO("shape " << at::IntArrayRef(shape) << ", channels last " << cl);
      const auto format = cl ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
      const auto x = sample(shape, at::kFloat, false, format);
      const std::vector<int64_t> out = {shape[0], shape[1], shape[2] / 2, shape[3] / 2};
      const auto g = at::randn(out).contiguous(format);
      const auto [ya, dxa] = aten_pool(x, g);
      const kiln::ops::cpu::PoolShape s{shape[0], shape[1], shape[2], shape[3], cl};
      for (const auto& [name, fwd] : KILN_CPU_BUILDS(max_pool2_forward)) {
        INFO("build " << name);
        auto y = at::empty(out, x.options().memory_format(format));
        auto code = at::empty(out, x.options().dtype(at::kByte).memory_format(format));
        fwd(kiln::ops::DType::kFloat, s, x.const_data_ptr(), y.data_ptr(), code.data_ptr<uint8_t>(), 0, s.units());
        REQUIRE(same(y, ya));
        for (const auto& [bname, bwd] : KILN_CPU_BUILDS(max_pool2_backward)) {
          if (bname != name) continue;
          auto dx = at::full(shape, 7.0f).contiguous(format);  // every element must be written
          bwd(kiln::ops::DType::kFloat, s, g.const_data_ptr(), code.const_data_ptr<uint8_t>(), dx.data_ptr(), 0,
              s.units());
          REQUIRE(same(dx, dxa));
        }
      }
    }
}

TEST_CASE("max_pool2: autograd, meta and bad input", "[ops][max_pool2]") {
  auto x = at::randn({2, 3, 4, 4}).requires_grad_(true);
  REQUIRE_THROWS_WITH(torch::autograd::grad({kiln::ops::max_pool2(x).square().sum()}, {x}, {}, true, true),
                      Contains("not differentiable"));
  {
    at::NoGradGuard no_grad;
    CHECK(!kiln::ops::max_pool2(x).requires_grad());
  }
  const auto meta = at::empty({2, 5, 7, 9}, at::TensorOptions().device(at::kMeta)).contiguous(at::MemoryFormat::ChannelsLast);
  const auto [y, code] = kiln::ops::max_pool2_forward(meta);
  CHECK(y.sizes() == at::IntArrayRef({2, 5, 3, 4}));
  CHECK(y.is_contiguous(at::MemoryFormat::ChannelsLast));
  CHECK(code.scalar_type() == at::kByte);
  CHECK(kiln::ops::max_pool2_backward(y, code, meta.sizes(), true).sizes() == meta.sizes());
  CHECK_THROWS_WITH(kiln::ops::max_pool2(at::randn({3, 4, 4})),
                    Contains("kiln::max_pool2_forward: x: expected a 4-D tensor (N, C, H, W), got shape [3, 4, 4]"));
  CHECK_THROWS_WITH(kiln::ops::max_pool2(at::randn({1, 2, 1, 4})), Contains("expected H and W of at least 2"));
  CHECK_THROWS_WITH(kiln::ops::max_pool2(at::randn({1, 2, 4, 4}, at::kDouble)),
                    Contains("x: expected dtype Float, BFloat16 or Half, got Double"));
  const auto [yy, cc] = kiln::ops::max_pool2_forward(at::randn({1, 2, 4, 4}));
  CHECK_THROWS_WITH(kiln::ops::max_pool2_backward(yy, cc.to(at::kInt), {1, 2, 4, 4}, false),
                    Contains("code: expected dtype Byte (the forward's), got Int"));
  CHECK_THROWS_WITH(kiln::ops::max_pool2_backward(yy.narrow(3, 0, 1), cc, {1, 2, 4, 4}, false),
                    Contains("grad: expected shape [1, 2, 2, 2], got [1, 2, 2, 1]"));
  // An empty batch is no error.
  CHECK(kiln::ops::max_pool2(at::randn({0, 2, 4, 4})).sizes() == at::IntArrayRef({0, 2, 2, 2}));
}
