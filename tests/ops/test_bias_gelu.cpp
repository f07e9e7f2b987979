// kiln::bias_gelu: gelu(x + b) in one pass, with dx and the fused db reduction:
// forward and gradients against ATen, central differences (first and second
// order), CUDA against CPU, non-contiguous inputs, bad input, autocast.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "gelu_truth.h"
#include "ops/ops.h"
#include "support.h"

using kiln::test::gradcheck;
using kiln::test::kFloatingDtypes;
using kiln::test::tolerance_for;

namespace {

const std::vector<std::vector<int64_t>> kShapes = {{7, 1}, {5, 3}, {33, 17}, {4, 1000}, {2, 5, 33}, {300, 256}};

// Shapes that leave each part of the CUDA backward's blocks ragged (bias_gelu_cuda.cu:
// 32 columns of packs by 8 row lanes, four rows in flight, row blocks summed by a
// second kernel): rows short of one lane each, of the four-row step, of the last row
// block; columns short of a warp (n = 96: 24 float packs), past several column blocks
// with the last one partial (n = 1160), and rows of odd length (n = 37: the
// element-wise kernels).
const std::vector<std::vector<int64_t>> kRaggedShapes = {{3, 96},    {29, 96}, {2049, 96}, {1029, 1160},
                                                         {5000, 37}, {1, 4096}, {70001, 8}};

at::Tensor ref_forward(const at::Tensor& x, const at::Tensor& b) {
  return at::gelu(x.to(at::kDouble) + b.to(at::kDouble), "tanh");
}

}  // namespace

TEST_CASE("bias_gelu forward matches gelu(x + b) for every dtype and shape", "[ops][bias_gelu]") {
  for (const auto dtype : kFloatingDtypes) {
    for (const auto& shape : kShapes) {
      INFO("dtype " << dtype << ", shape " << at::IntArrayRef(shape));
      const auto x = (at::randn(shape, at::kDouble) * 2).to(dtype);
      const auto b = at::randn({shape.back()}, at::kDouble).to(dtype);
      const auto y = kiln::ops::bias_gelu(x, b);
      REQUIRE(y.sizes() == x.sizes());
      REQUIRE(y.scalar_type() == dtype);
      // x + b rounds once in the dtype in ATen's unfused pair; kiln adds in float,
      // so compare with the exact sum.
      const auto tol = tolerance_for(dtype);
      KILN_REQUIRE_CLOSE(y, ref_forward(x, b), tol.rtol, tol.atol);
    }
  }
}

TEST_CASE("bias_gelu backward gives dx and the summed db", "[ops][bias_gelu]") {
  for (const auto dtype : kFloatingDtypes) {
    for (const auto& shape : kShapes) {
      INFO("dtype " << dtype << ", shape " << at::IntArrayRef(shape));
      const auto x = (at::randn(shape, at::kDouble) * 2).to(dtype);
      const auto b = at::randn({shape.back()}, at::kDouble).to(dtype);
      const auto g = at::randn(shape, at::kDouble).to(dtype);
      const auto [dx, db] = kiln::ops::bias_gelu_backward(g, x, b);
      const auto dz = at::gelu_backward(g.to(at::kDouble), x.to(at::kDouble) + b.to(at::kDouble), "tanh");
      const auto db_ref = dz.reshape({-1, shape.back()}).sum(0);
      const auto tol = tolerance_for(dtype);
      KILN_REQUIRE_CLOSE(dx, dz, tol.rtol, tol.atol);
      // db sums up to 300 rows: an absolute tolerance that grows with √rows.
      const double rows = static_cast<double>(x.numel() / shape.back());
      REQUIRE(db.scalar_type() == dtype);
      KILN_REQUIRE_CLOSE(db, db_ref, tol.rtol, tol.atol * std::sqrt(rows) * 4);
    }
  }
}

TEST_CASE("bias_gelu gradients match central differences, twice", "[ops][bias_gelu]") {
  const auto x0 = at::randn({6, 5}, at::kDouble) * 2;
  const auto b0 = at::randn({5}, at::kDouble);
  for (const auto& [name, c] : std::vector<std::pair<std::string, kiln::test::Closeness>>{
           {"x", gradcheck([&](const at::Tensor& x) { return kiln::ops::bias_gelu(x, b0); }, x0)},
           {"b", gradcheck([&](const at::Tensor& b) { return kiln::ops::bias_gelu(x0, b); }, b0)}}) {
    INFO("gradient in " << name << ": " << c.report);
    REQUIRE(c.ok);
  }
  // Second order: d/dx of <d bias_gelu/dx, w>, and d/db of the same.
  const auto w = at::randn({6, 5}, at::kDouble);
  const auto first_in_x = [&](const at::Tensor& x) {
    const auto xr = x.requires_grad() ? x : x.detach().requires_grad_(true);
    return torch::autograd::grad({kiln::ops::bias_gelu(xr, b0)}, {xr}, {w}, true, true)[0];
  };
  const auto first_in_b = [&](const at::Tensor& b) {
    const auto br = b.requires_grad() ? b : b.detach().requires_grad_(true);
    return torch::autograd::grad({kiln::ops::bias_gelu(x0, br)}, {br}, {w}, true, true)[0];
  };
  for (const auto& c : {gradcheck(first_in_x, x0), gradcheck(first_in_b, b0)}) {
    INFO(c.report);
    REQUIRE(c.ok);
  }
}

TEST_CASE("bias_gelu is correct on non-contiguous inputs", "[ops][bias_gelu]") {
  const auto base = at::randn({48, 64});
  const auto b = at::randn({48}).slice(0, 0, 48);
  const auto x = base.t();  // (64, 48), transposed
  KILN_REQUIRE_CLOSE(kiln::ops::bias_gelu(x, b), ref_forward(x, b), 1e-5, 1e-5);
  const auto xs = at::randn({10, 96}).slice(1, 0, 96, 2);  // (10, 48), strided
  KILN_REQUIRE_CLOSE(kiln::ops::bias_gelu(xs, b), ref_forward(xs, b), 1e-5, 1e-5);
}

TEST_CASE("bias_gelu rejects bad input with a message naming the argument", "[ops][bias_gelu]") {
  const auto x = at::randn({4, 8});
  REQUIRE_THROWS_WITH(kiln::ops::bias_gelu(x, at::randn({7})),
                      Catch::Contains("kiln::bias_gelu: b: expected shape [8] (the last dimension of x), got [7]"));
  REQUIRE_THROWS_WITH(kiln::ops::bias_gelu(x, at::randn({1, 8})),
                      Catch::Contains("b: expected shape [8]") && Catch::Contains("got [1, 8]"));
  REQUIRE_THROWS_WITH(kiln::ops::bias_gelu(x, at::randn({8}, at::kDouble)),
                      Catch::Contains("kiln::bias_gelu: b: expected dtype Float (the dtype of x), got Double"));
  REQUIRE_THROWS_WITH(kiln::ops::bias_gelu(at::ones({4, 8}, at::kInt), at::ones({8}, at::kInt)),
                      Catch::Contains("kiln::bias_gelu: x: expected a floating-point tensor"));
  REQUIRE_THROWS_WITH(kiln::ops::bias_gelu_backward(at::randn({4, 7}), x, at::randn({8})),
                      Catch::Contains("kiln::bias_gelu_backward: grad: expected shape [4, 8]"));
}

TEST_CASE("under CPU autocast bias_gelu runs in x's dtype, casting the bias", "[ops][bias_gelu][autocast]") {
  const auto x = at::randn({4, 8}).to(at::kBFloat16);
  const auto b = at::randn({8}).requires_grad_(true);  // an fp32 parameter
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  const auto y = kiln::ops::bias_gelu(x, b);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  REQUIRE(y.scalar_type() == at::kBFloat16);
  KILN_REQUIRE_CLOSE(y, ref_forward(x, b.detach().to(at::kBFloat16)), 1.6e-2, 1.6e-2);
  y.sum().backward();
  REQUIRE(b.grad().defined());
  REQUIRE(b.grad().scalar_type() == at::kFloat);
}

TEST_CASE("bias_gelu on CUDA matches CPU for every dtype", "[ops][bias_gelu][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  auto shapes = kShapes;
  shapes.insert(shapes.end(), kRaggedShapes.begin(), kRaggedShapes.end());
  for (const auto dtype : kFloatingDtypes) {
    for (const auto& shape : shapes) {
      INFO("dtype " << dtype << ", shape " << at::IntArrayRef(shape));
      const auto x = (at::randn(shape) * 2).to(dtype);
      const auto b = at::randn({shape.back()}).to(dtype);
      const auto g = at::randn(shape).to(dtype);
      const auto tol = tolerance_for(dtype);
      kiln::test::require_cuda_matches_cpu(
          [](const std::vector<at::Tensor>& in) {
            auto [dx, db] = kiln::ops::bias_gelu_backward(in[2], in[0], in[1]);
            return std::vector<at::Tensor>{kiln::ops::bias_gelu(in[0], in[1]), dx, db};
          },
          {x, b, g}, {tol.rtol, tol.atol * std::sqrt(static_cast<double>(x.numel() / shape.back())) * 4});
    }
  }
  // The forward's packed kernel past what its grid covers four times over (cuda_support.cuh):
  // rows of 1,024 (a multiple of every pack), and of 1,000 + 4 = 1,004, a multiple of
  // float32's pack of 4 but not of the half types' 8 (their element-wise kernel).
  for (const int64_t n : {1024, 1004}) {
    for (const auto dtype : kFloatingDtypes) {
      INFO("dtype " << dtype << ", rows of " << n);
      const int64_t rows = ((int64_t{1} << 25) + n - 1) / n;
      const auto x = (at::randn({rows, n}) * 2).to(dtype), b = at::randn({n}).to(dtype);
      const auto tol = tolerance_for(dtype);
      KILN_REQUIRE_CLOSE(kiln::ops::bias_gelu(x.cuda(), b.cuda()).cpu().to(at::kDouble), ref_forward(x, b),
                         tol.rtol, tol.atol);
    }
  }
}

namespace {

// bias_gelu and its gradient dx on `device` in half and bfloat16 within one ulp of the
// dtype of the float64 truth from the same inputs (x + b exact, as kiln adds in float);
// x + b within ±8, short of where exp's cap (gelu_math::kExpCap) leaves ~1e-34 for 0.
void require_reduced_bias_gelu_within_one_ulp(const std::vector<int64_t>& shape, const at::Device device) {
  for (const auto dtype : {at::kHalf, at::kBFloat16}) {
    INFO("dtype " << dtype << " on " << device << ", shape " << at::IntArrayRef(shape));
    const auto x = ((at::rand(shape) * 2 - 1) * 6).to(dtype);
    const auto b = at::randn({shape.back()}).clamp(-2, 2).to(dtype);
    const auto g = at::randn(shape).to(dtype);
    const auto truth = kiln::test::gelu_truth(x.to(at::kDouble) + b.to(at::kDouble));
    const auto y = kiln::test::within_one_ulp(kiln::ops::bias_gelu(x.to(device), b.to(device)), truth.y);
    INFO("forward: " << y.report);
    REQUIRE(y.ok);
    auto [dx, db] = kiln::ops::bias_gelu_backward(g.to(device), x.to(device), b.to(device));
    const auto d = kiln::test::within_one_ulp(dx, g.to(at::kDouble) * truth.dy,
                                              kiln::test::kDerivativeSlack * g.abs());
    INFO("dx: " << d.report);
    REQUIRE(d.ok);
  }
}

}  // namespace

TEST_CASE("bias_gelu in half and bfloat16 is within one ulp of float64", "[ops][bias_gelu]") {
  for (const auto& shape : kRaggedShapes) require_reduced_bias_gelu_within_one_ulp(shape, at::kCPU);
}

// On CUDA, half and bfloat16 take the approximate exp and division (gelu_cuda_math.cuh).
TEST_CASE("bias_gelu on CUDA in half and bfloat16 is within one ulp of float64", "[ops][bias_gelu][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  for (const auto& shape : kRaggedShapes) require_reduced_bias_gelu_within_one_ulp(shape, at::kCUDA);
}
