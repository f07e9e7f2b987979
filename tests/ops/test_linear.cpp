// kiln::linear, kiln::linear_gelu and kiln::linear_relu: forward against ATen in
// float64 for every dtype, gradients against central differences in double, CUDA against CPU
// (with and without bias, N = 13 for cuBLASLt's fallback), non-contiguous inputs,
// bad input and the autocast policy.
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "ops/cpu_bf16.h"
#include "ops/gelu/gelu_kernel.h"
#include "ops/linear/linear_kernel.h"
#include "ops/relu/relu_kernel.h"
#include "ops/linear/linear_onednn.h"
#include "ops/ops.h"
#include "cpu_builds.h"
#include "support.h"

using kiln::test::gradcheck;
using kiln::test::kFloatingDtypes;
using kiln::test::Tolerance;

namespace {

struct Shape {
  int64_t B, K, N;
};

// Small, odd, and N = 13 (no multiple of 8: cuBLASLt's GELU_AUX cannot keep z).
const std::vector<Shape> kShapes = {{1, 1, 1}, {5, 7, 3}, {16, 64, 13}, {33, 300, 40}, {8, 96, 64}};

// The outputs are sums of `len` products of unit-scale numbers, so their scale (and
// the rounding error accumulated along the sum) grows like sqrt(len): the absolute
// part of the tolerance grows with it, the relative part stays as tolerance_for says.
Tolerance tolerance(at::ScalarType dtype, int64_t len) {
  const auto t = kiln::test::tolerance_for(dtype);
  return {t.rtol, t.atol * std::sqrt(static_cast<double>(std::max<int64_t>(len, 1)))};
}

struct Inputs {
  at::Tensor x, w, b;
};

Inputs sample(const Shape& s, at::ScalarType dtype) {
  return {at::randn({s.B, s.K}).to(dtype), at::randn({s.N, s.K}).to(dtype),
          at::randn({s.N}).to(dtype)};
}

std::optional<at::Tensor> opt(const at::Tensor& b) {
  return b.defined() ? std::optional<at::Tensor>(b) : std::nullopt;
}

// x·wᵀ + b computed in float64 from the same (rounded) inputs.
at::Tensor reference(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return at::linear(x.to(at::kDouble), w.to(at::kDouble),
                    b.defined() ? b.to(at::kDouble) : at::Tensor());
}

// linear_gelu's backward needs kiln::gelu_backward, another op; it is reported as
// skipped while that op is not in this build (KILN_OPS).
bool gelu_built() {
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("kiln::gelu_backward", "");
  return op.hasKernelForDispatchKey(c10::DispatchKey::CPU);
}

// KILN_CPU_LINEAR=blas: every product on at::addmm / at::mm, none on oneDNN; =onednn:
// every float32 one on oneDNN (ctest runs the [linear] cases under both too).
bool env_is(const char* name, std::string_view value) {
  const char* env = std::getenv(name);
  return env != nullptr && std::string_view(env) == value;
}
bool linear_policy_is(std::string_view value) { return env_is("KILN_CPU_LINEAR", value); }

// Whether libtorch has oneDNN's inner product (mkldnn::_linear_pointwise).
bool has_inner_product() {
  return c10::Dispatcher::singleton().findSchema({"mkldnn::_linear_pointwise", ""}).has_value();
}
bool blas_forced() { return linear_policy_is("blas"); }
bool onednn_forced() { return linear_policy_is("onednn"); }

// t with a stride of 2 in its last dimension (t[..., ::2] of a tensor twice as wide):
// the same values, not contiguous.
at::Tensor stepped(const at::Tensor& t) { return at::stack({t, t}, -1).select(-1, 0); }

bool gelu_built_or_skip() {
  return gelu_built() || kiln::test::skip("kiln::gelu_backward is not built");
}

// While alive, counts the ATen ops this thread runs that a product on the CPU may be
// made of: aten::mm, aten::addmm, and the unfused epilogue's aten::add, relu and gelu.
class ProductCounts {
 public:
  ProductCounts() {
    current_ = this;
    handle_ = at::addThreadLocalCallback(
        at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
          const std::string_view name = fn.name();
          if (name == "aten::mm") ++current_->mm;
          if (name == "aten::addmm") ++current_->addmm;
          if (name == "aten::add" || name == "aten::relu" || name == "aten::gelu") ++current_->add;
          return nullptr;
        }).needsInputs(false));
  }
  ~ProductCounts() {
    at::removeCallback(handle_);
    current_ = nullptr;
  }
  ProductCounts(const ProductCounts&) = delete;
  ProductCounts& operator=(const ProductCounts&) = delete;
  int mm = 0, addmm = 0, add = 0;

 private:
  static thread_local ProductCounts* current_;
  at::CallbackHandle handle_;
};
thread_local ProductCounts* ProductCounts::current_ = nullptr;

}  // namespace

TEST_CASE("linear forward matches at::linear for every dtype", "[ops][linear]") {
  for (const auto dtype : kFloatingDtypes) {
    for (const auto& s : kShapes) {
      for (const bool bias : {true, false}) {
        INFO("dtype " << dtype << ", B " << s.B << ", K " << s.K << ", N " << s.N << ", bias " << bias);
        auto in = sample(s, dtype);
        if (!bias) in.b = at::Tensor();
        const auto y = kiln::ops::linear(in.x, in.w, opt(in.b));
        REQUIRE(y.scalar_type() == dtype);
        const auto tol = tolerance(dtype, s.K);
        KILN_REQUIRE_CLOSE(y, reference(in.x, in.w, in.b), tol.rtol, tol.atol);
      }
    }
  }
}

TEST_CASE("linear_gelu and linear_gelu_forward match gelu_tanh(at::linear)", "[ops][linear]") {
  for (const auto dtype : kFloatingDtypes) {
    for (const auto& s : kShapes) {
      for (const bool bias : {true, false}) {
        INFO("dtype " << dtype << ", B " << s.B << ", K " << s.K << ", N " << s.N << ", bias " << bias);
        auto in = sample(s, dtype);
        if (!bias) in.b = at::Tensor();
        const auto z_ref = reference(in.x, in.w, in.b);
        const auto y_ref = at::gelu(z_ref, "tanh");
        const auto tol = tolerance(dtype, s.K);  // |gelu'| ≤ 1.13: the error carries over
        const auto y = kiln::ops::linear_gelu(in.x, in.w, opt(in.b));
        REQUIRE(y.scalar_type() == dtype);
        KILN_REQUIRE_CLOSE(y, y_ref, tol.rtol, tol.atol);
        const auto [y2, z] = kiln::ops::linear_gelu_forward(in.x, in.w, opt(in.b));
        KILN_REQUIRE_CLOSE(y2, y_ref, tol.rtol, tol.atol);
        KILN_REQUIRE_CLOSE(z, z_ref, tol.rtol, tol.atol);
      }
    }
  }
}

namespace {
// linear_relu's backward needs kiln::relu_backward, another op: skipped while that op
// is not in this build (KILN_OPS).
bool relu_built_or_skip() {
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("kiln::relu_backward", "");
  return op.hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
         kiln::test::skip("kiln::relu_backward is not built");
}

using Layer = at::Tensor (*)(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&);

// The layer's gradients in x, w and b (and in x without a bias) match central
// differences, in double precision.
void require_gradients(Layer layer) {
  const auto in = sample({4, 6, 5}, at::kDouble);
  const auto x = in.x, w = in.w, b = in.b;
  const std::vector<std::pair<std::string, kiln::test::Closeness>> checks = {
      {"x", gradcheck([&](const at::Tensor& t) { return layer(t, w, b); }, x)},
      {"w", gradcheck([&](const at::Tensor& t) { return layer(x, t, b); }, w)},
      {"b", gradcheck([&](const at::Tensor& t) { return layer(x, w, t); }, b)},
      {"x, no bias", gradcheck([&](const at::Tensor& t) { return layer(t, w, std::nullopt); }, x)},
  };
  for (const auto& [name, c] : checks) {
    INFO(name << ": " << c.report);
    REQUIRE(c.ok);
  }
}

// d/d(arg) <layer(x, w, b), v> taken with create_graph, as a function of each other
// input, matches central differences (double precision): for linear these are linear
// in v and in the other operand, and so are linear_relu's, whose mask is locally
// constant.
void require_double_backward(Layer layer) {
  const auto in = sample({4, 6, 5}, at::kDouble);
  const auto x = in.x.clone().requires_grad_(true), w = in.w.clone().requires_grad_(true);
  const auto b = in.b.clone().requires_grad_(true);
  const auto v = at::randn({4, 5}, at::kDouble);
  const auto grad_of = [&](const at::Tensor& xx, const at::Tensor& ww, const at::Tensor& vv,
                           const at::Tensor& wrt) {
    const auto y = layer(xx, ww, b);
    return torch::autograd::grad({y}, {wrt}, {vv}, /*retain_graph=*/true, /*create_graph=*/true)[0];
  };
  const std::vector<std::pair<std::string, kiln::test::Closeness>> checks = {
      {"dx(w)", gradcheck([&](const at::Tensor& t) { return grad_of(x, t, v, x); }, in.w)},
      {"dw(x)", gradcheck([&](const at::Tensor& t) { return grad_of(t, w, v, w); }, in.x)},
      {"dx(v)", gradcheck([&](const at::Tensor& t) { return grad_of(x, w, t, x); }, v)},
      {"dw(v)", gradcheck([&](const at::Tensor& t) { return grad_of(x, w, t, w); }, v)},
      {"db(v)", gradcheck([&](const at::Tensor& t) { return grad_of(x, w, t, b); }, v)},
  };
  for (const auto& [name, c] : checks) {
    INFO(name << ": " << c.report);
    REQUIRE(c.ok);
  }
}
}  // namespace

TEST_CASE("linear_relu is relu(linear) bit for bit and matches float64 on every CPU path",
          "[ops][linear]") {
  // kShapes, 32 rows (the transposed BLAS product where MKL is float32's library) and
  // 128 × 300 → 257 (oneDNN's inner product with its fused ReLU where float32 or
  // bfloat16 goes there): the same product as kiln::linear, so ReLU after it must give
  // the same bits, and both match ReLU of the float64 product.
  auto shapes = kShapes;
  shapes.push_back({32, 300, 257});
  shapes.push_back({128, 300, 257});
  for (const auto dtype : kFloatingDtypes) {
    for (const auto& s : shapes) {
      for (const bool bias : {true, false}) {
        INFO("dtype " << dtype << ", B " << s.B << ", K " << s.K << ", N " << s.N << ", bias " << bias);
        auto in = sample(s, dtype);
        if (!bias) in.b = at::Tensor();
        const auto y = kiln::ops::linear_relu(in.x, in.w, opt(in.b));
        REQUIRE(y.scalar_type() == dtype);
        REQUIRE(y.sizes() == at::IntArrayRef{s.B, s.N});
        REQUIRE(at::equal(y, at::relu(kiln::ops::linear(in.x, in.w, opt(in.b)))));
        if (s.B * s.N >= 100) REQUIRE(y.min().item<double>() == 0.0);  // about half are cut
        const auto tol = tolerance(dtype, s.K);
        KILN_REQUIRE_CLOSE(y, at::relu(reference(in.x, in.w, in.b)), tol.rtol, tol.atol);
      }
    }
  }
}

TEST_CASE("linear_relu propagates NaN as relu does", "[ops][linear]") {
  // On every CPU path, and on CUDA (cuBLASLt's RELU epilogue) where there is a GPU.
  std::vector<at::Device> devices{at::kCPU};
  if (torch::cuda::is_available()) devices.emplace_back(at::kCUDA);
  for (const auto& device : devices) {
    for (const auto dtype : {at::kFloat, at::kBFloat16}) {
      for (const Shape s : {Shape{5, 7, 3}, Shape{32, 300, 257}, Shape{128, 300, 257}}) {
        INFO(device << ", dtype " << dtype << ", B " << s.B << ", K " << s.K << ", N " << s.N);
        auto in = sample(s, dtype);
        in.x[1][2] = std::nan("");  // row 1 of the product is NaN throughout
        const auto y = kiln::ops::linear_relu(in.x.to(device), in.w.to(device), in.b.to(device)).cpu();
        REQUIRE(y[1].isnan().all().item<bool>());
        REQUIRE_FALSE(y[0].isnan().any().item<bool>());
      }
    }
  }
}

TEST_CASE("linear_relu's gradients match central differences and relu(linear)'s", "[ops][linear]") {
  if (!relu_built_or_skip()) return;
  require_gradients(&kiln::ops::linear_relu);
  // In float32 the same gradients, bit for bit, as relu after linear (one autograd
  // node with the mask from the saved output, against two).
  const auto f = sample({32, 300, 257}, at::kFloat);
  const auto g = at::randn({32, 257});
  std::vector<at::Tensor> fused, pair;
  for (auto* out : {&fused, &pair}) {
    const auto xg = f.x.clone().requires_grad_(true), wg = f.w.clone().requires_grad_(true);
    const auto bg = f.b.clone().requires_grad_(true);
    const auto y = out == &fused ? kiln::ops::linear_relu(xg, wg, bg)
                                 : kiln::ops::relu(kiln::ops::linear(xg, wg, bg));
    y.backward(g);
    *out = {xg.grad(), wg.grad(), bg.grad()};
  }
  for (size_t i = 0; i < 3; ++i) {
    INFO("gradient " << i << " (x, w, b)");
    REQUIRE(at::equal(fused[i], pair[i]));
  }
}

TEST_CASE("linear_relu makes one autograd node that keeps x, w and its output", "[ops][linear]") {
  if (!relu_built_or_skip()) return;
  const auto x = at::randn({4, 6}).requires_grad_(true), w = at::randn({5, 6}).requires_grad_(true);
  const auto b = at::randn({5}).requires_grad_(true);
  const auto y = kiln::ops::linear_relu(x, w, b);
  const auto node = y.grad_fn();
  REQUIRE(node != nullptr);
  INFO("node " << node->name());
  REQUIRE(node->name().find("LinearReluFunction") != std::string::npos);
  // Its inputs' edges lead straight to the leaves' accumulators: no relu node between.
  REQUIRE(node->num_outputs() == 3);
  for (const auto& edge : node->next_edges())
    REQUIRE(edge.function->name() == "torch::autograd::AccumulateGrad");
  // A later in-place change of the output (which backward reads for its mask) is caught.
  const auto y2 = kiln::ops::linear_relu(x, w, b);
  y2.mul_(2);
  REQUIRE_THROWS_WITH(y2.sum().backward(), Catch::Contains("modified by an inplace operation"));
}

TEST_CASE("linear_relu backward is differentiable (double backward)", "[ops][linear]") {
  if (!relu_built_or_skip()) return;
  require_double_backward(&kiln::ops::linear_relu);
}

TEST_CASE("linear handles empty batches and K = 0", "[ops][linear]") {
  const auto w = at::randn({3, 4}), b = at::randn({3});
  REQUIRE(kiln::ops::linear(at::randn({0, 4}), w, b).sizes() == at::IntArrayRef{0, 3});
  // No products to sum: the output is the bias on every row.
  const auto y = kiln::ops::linear(at::randn({2, 0}), at::randn({3, 0}), b);
  KILN_REQUIRE_CLOSE(y, b.expand({2, 3}), 0.0, 0.0);
}

TEST_CASE("linear_backward is (grad·w, gradᵀ·x, grad.sum(0))", "[ops][linear]") {
  for (const auto dtype : kFloatingDtypes) {
    const Shape s{9, 20, 13};
    INFO("dtype " << dtype);
    const auto in = sample(s, dtype);
    const auto g = at::randn({s.B, s.N}).to(dtype);
    const auto [dx, dw, db] = kiln::ops::linear_backward(g, in.x, in.w);
    const auto gd = g.to(at::kDouble);
    const auto tol = tolerance(dtype, std::max(s.B, s.N));
    KILN_REQUIRE_CLOSE(dx, gd.mm(in.w.to(at::kDouble)), tol.rtol, tol.atol);
    KILN_REQUIRE_CLOSE(dw, gd.t().mm(in.x.to(at::kDouble)), tol.rtol, tol.atol);
    KILN_REQUIRE_CLOSE(db, gd.sum(0), tol.rtol, tol.atol);
    // output_mask: exactly the asked-for gradients, each equal to the full call's.
    for (int m = 0; m < 8; ++m) {
      const std::array<bool, 3> mask = {(m & 1) != 0, (m & 2) != 0, (m & 4) != 0};
      INFO("mask " << mask[0] << mask[1] << mask[2]);
      const auto [mx, mw, mb] = kiln::ops::linear_backward(g, in.x, in.w, mask);
      REQUIRE(mx.defined() == mask[0]);
      REQUIRE(mw.defined() == mask[1]);
      REQUIRE(mb.defined() == mask[2]);
      if (mask[0]) KILN_REQUIRE_CLOSE(mx, dx, 0.0, 0.0);
      if (mask[1]) KILN_REQUIRE_CLOSE(mw, dw, 0.0, 0.0);
      if (mask[2]) KILN_REQUIRE_CLOSE(mb, db, 0.0, 0.0);
    }
  }
}

TEST_CASE("float32 products go to oneDNN by default on every CPU but Intel's", "[ops][linear]") {
  // MKL runs its own tuned kernels only on Intel's CPUs (a generic path on AMD's, which
  // oneDNN beat by 14-27 % on a Zen 4; on an Intel Xeon MKL beat oneDNN).
  using kiln::ops::linear_float32_onednn_by_default;
  CHECK_FALSE(linear_float32_onednn_by_default("GenuineIntel"));
  CHECK(linear_float32_onednn_by_default("AuthenticAMD"));
  CHECK(linear_float32_onednn_by_default("HygonGenuine"));
  CHECK(linear_float32_onednn_by_default(""));  // no CPUID: not x86
  const auto vendor = kiln::ops::cpu_vendor();
#if defined(__x86_64__)
  CHECK(vendor.size() == 12);
  __builtin_cpu_init();
  CHECK((vendor == "GenuineIntel") == static_cast<bool>(__builtin_cpu_is("intel")));
  CHECK((vendor == "AuthenticAMD") == static_cast<bool>(__builtin_cpu_is("amd")));
#else
  CHECK(vendor.empty());
#endif
}

TEST_CASE("a float32 linear past oneDNN's thresholds runs there and matches float64", "[ops][linear]") {
  // 128·300·257 multiply-adds ≥ 2^23: where float32 goes to oneDNN (the case above, or
  // KILN_CPU_LINEAR=onednn), forward and dx through mkldnn::_linear_pointwise where
  // libtorch has it, dw through oneDNN's matmul where it is usable on this CPU; odd sizes and a transposed x (made contiguous by the inner
  // product, taken as it is by the matmul).
  static thread_local int inner = 0, matmul = 0, blas = 0;
  const auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        const std::string_view name = fn.name();
        if (name.starts_with("mkldnn::_linear_pointwise")) ++inner;
        if (name == "kiln::onednn_matmul") ++matmul;
        if (name.starts_with("aten::mm") || name.starts_with("aten::addmm")) ++blas;
        return nullptr;
      }).needsInputs(false));
  const bool has_op = has_inner_product();
  // float32 goes to oneDNN by default except on Intel's CPUs (MKL's own kernels there).
  const bool float32_onednn =
      onednn_forced() ||
      (!blas_forced() && kiln::ops::linear_float32_onednn_by_default(kiln::ops::cpu_vendor()));
  REQUIRE(kiln::ops::linear_float32_onednn() == float32_onednn);
  const bool expect_inner = has_op && float32_onednn;
  const bool matmul_usable = kiln::ops::linear_onednn_matmul_available();
  const bool expect_matmul = matmul_usable && float32_onednn;
  if (blas_forced()) CHECK_FALSE(matmul_usable);
#if defined(__x86_64__)
  // libtorch's matmul accepts float32 on CPUs with AVX-512 BW, VL and DQ: there the
  // path must be found (torch 2.11 to 2.14 have it), not silently dropped.
  if (!blas_forced() && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    CHECK(matmul_usable);
#endif
  // Layouts: x plain, x transposed with b a slice with a step (b[::2]), and x, w and
  // b all such slices (oneDNN's inner product reads a stepped bias as if it were dense
  // when x and w are plain or transposed, unless it is copied).
  for (const int layout : {0, 1, 2}) {
    INFO("x layout " << layout << " (plain, transposed, stepped), float32 on oneDNN " << float32_onednn
                     << ", its matmul usable " << matmul_usable);
    const auto in = sample({128, 300, 257}, at::kFloat);
    const auto x0 = layout == 1 ? in.x.t().contiguous().t() : layout == 2 ? stepped(in.x) : in.x.clone();
    const auto x = x0.detach().requires_grad_(true);
    const auto w = (layout == 2 ? stepped(in.w) : in.w.clone()).detach().requires_grad_(true);
    const auto b = (layout >= 1 ? stepped(in.b) : in.b.clone()).detach().requires_grad_(true);
    if (layout == 2) REQUIRE((!x.is_contiguous() && !w.is_contiguous() && !b.is_contiguous()));
    inner = matmul = blas = 0;
    const auto y = kiln::ops::linear(x, w, b);
    const auto g = at::randn({128, 257});
    y.backward(g);
    CHECK(inner == (expect_inner ? 2 : 0));  // z and dx
    CHECK(matmul == (expect_matmul ? 1 : 0));  // dw
    CHECK(inner + matmul + blas == 3);
    const auto tol = tolerance(at::kFloat, 300);
    KILN_REQUIRE_CLOSE(y, reference(in.x, in.w, in.b), tol.rtol, tol.atol);
    const auto gd = g.to(at::kDouble);
    KILN_REQUIRE_CLOSE(x.grad(), gd.mm(in.w.to(at::kDouble)), tol.rtol, tolerance(at::kFloat, 257).atol);
    KILN_REQUIRE_CLOSE(w.grad(), gd.t().mm(in.x.to(at::kDouble)), tol.rtol, tolerance(at::kFloat, 128).atol);
  }
  // The weight gradient on operands of every layout: an expanded grad (a sum's
  // backward: zero strides), x a strided slice, w transposed (dw takes its strides).
  const auto x = at::randn({128, 600}).slice(1, 0, 600, 2);
  const auto w = at::randn({300, 257}).t();
  for (const auto& g : {at::randn({1, 257}).expand({128, 257}), at::randn({257, 128}).t()}) {
    INFO("grad strides " << g.strides());
    inner = matmul = blas = 0;
    const auto dw = std::get<1>(kiln::ops::linear_backward(g, x, w, {false, true, false}));
    CHECK(matmul == (expect_matmul ? 1 : 0));
    KILN_REQUIRE_CLOSE(dw, g.to(at::kDouble).t().mm(x.to(at::kDouble)), 1e-4, tolerance(at::kFloat, 128).atol);
  }
  at::removeCallback(handle);
}

TEST_CASE("a float32 product of 16 to 48 rows on BLAS runs transposed and matches float64",
          "[ops][linear]") {
  // zᵀ = w·xᵀ in one at::mm, then z = its transpose (+ b, relu) in one pass of kiln's, where MKL's
  // x·wᵀ with that few rows is slow and MKL is float32's library; 8 and 64 rows keep
  // at::addmm / at::mm, and so does every row count where float32 goes to oneDNN
  // (products under its threshold included). KILN_CPU_LINEAR_TRANSPOSED=off keeps the
  // direct form.
  ProductCounts counts;
  auto &mm = counts.mm, &addmm = counts.addmm, &add = counts.add;
  const bool off = env_is("KILN_CPU_LINEAR_TRANSPOSED", "off");
  const bool has_op = has_inner_product();
  for (const int64_t rows : {8, 16, 32, 48, 64}) {
    // oneDNN takes the product where float32 goes there and it is large enough (64 rows)
    const bool on_onednn = has_op && kiln::ops::linear_float32_onednn() &&
                           (onednn_forced() || rows * 300 * 257 >= (int64_t{1} << 22));
    // only where MKL is float32's library (Intel's CPUs, or KILN_CPU_LINEAR=blas)
    const bool transposed = !off && !kiln::ops::linear_float32_onednn() && rows >= 16 && rows <= 48;
    for (const int layout : {0, 1}) {  // plain; x transposed, w and b stepped
      for (const bool bias : {true, false}) {
        INFO("rows " << rows << ", layout " << layout << ", bias " << bias << ", transposed " << transposed);
        const auto in = sample({rows, 300, 257}, at::kFloat);
        const auto x = layout == 1 ? in.x.t().contiguous().t() : in.x;
        const auto w = layout == 1 ? stepped(in.w) : in.w;
        const auto b = bias ? (layout == 1 ? stepped(in.b) : in.b) : at::Tensor();
        mm = addmm = add = 0;
        const auto y = kiln::ops::linear(x, w, opt(b));
        REQUIRE(y.is_contiguous());
        if (transposed) {
          CHECK(mm == 1);
          CHECK(addmm == 0);
          CHECK(add == 0);  // the move into z, the bias and relu are kiln's own pass
          // That pass is ATen's unfused ops bit for bit: the transpose (+ b), then relu.
          const auto zt = at::mm(w, x.t());
          const auto unfused = b.defined() ? at::add(zt.t(), b) : zt.t().contiguous();
          REQUIRE(at::equal(y, unfused));
          REQUIRE(at::equal(kiln::ops::linear_relu(x, w, opt(b)), at::relu(unfused)));
        } else {
          CHECK(addmm + mm == (on_onednn ? 0 : 1));
          CHECK(add == 0);
        }
        const auto tol = tolerance(at::kFloat, 300);
        KILN_REQUIRE_CLOSE(y, reference(in.x, in.w, b.defined() ? in.b : at::Tensor()), tol.rtol, tol.atol);
        if (gelu_built())
          KILN_REQUIRE_CLOSE(kiln::ops::linear_gelu(x, w, opt(b)),
                             at::gelu(reference(in.x, in.w, b.defined() ? in.b : at::Tensor()), "tanh"),
                             tol.rtol, tol.atol);
      }
    }
  }
}

TEST_CASE("a float32 product with a bias on the library's direct path is at::mm and kiln's bias pass",
          "[ops][linear]") {
  // Where neither oneDNN's inner product nor the transposed form takes a float32
  // product with a bias, it is at::mm without the bias and then one pass of kiln's
  // adding the bias (and relu, or gelu beside z): at::mm + b, then relu or kiln's gelu,
  // bit for bit. KILN_CPU_LINEAR_BIAS=addmm keeps at::addmm (ctest runs [linear] so too).
  ProductCounts counts;
  auto &mm = counts.mm, &addmm = counts.addmm, &add = counts.add;
  const bool addmm_forced = env_is("KILN_CPU_LINEAR_BIAS", "addmm");
  const bool transposed_off = env_is("KILN_CPU_LINEAR_TRANSPOSED", "off");
  const bool has_op = has_inner_product();
  // rows below, inside and past the transposed form's 16-48; widths with vector tails
  const std::vector<Shape> shapes = {{1, 5, 3}, {5, 37, 13}, {32, 64, 16}, {64, 300, 257}, {200, 33, 40}};
  for (const auto& s : shapes) {
    const bool on_onednn = has_op && kiln::ops::linear_float32_onednn() &&
                           (onednn_forced() || s.B * s.K * s.N >= (int64_t{1} << 22));
    const bool transposed = !transposed_off && !kiln::ops::linear_float32_onednn() && s.B >= 16 && s.B <= 48;
    const bool pass = !addmm_forced && !on_onednn && !transposed;
    for (const int layout : {0, 1}) {  // plain; x transposed, w and b stepped
      INFO("shape " << s.B << "x" << s.K << "x" << s.N << ", layout " << layout << ", bias pass " << pass);
      const auto in = sample(s, at::kFloat);
      const auto x = layout == 1 ? in.x.t().contiguous().t() : in.x;
      const auto w = layout == 1 ? stepped(in.w) : in.w;
      const auto b = layout == 1 ? stepped(in.b) : in.b;
      mm = addmm = add = 0;
      const auto y = kiln::ops::linear(x, w, b);
      const auto r = kiln::ops::linear_relu(x, w, b);
      if (pass) {
        CHECK(mm == 2);
        CHECK(addmm == 0);
        CHECK(add == 0);
        const auto unfused = at::add(at::mm(x, w.t()), b);
        REQUIRE(at::equal(y, unfused));
        REQUIRE(at::equal(r, at::relu(unfused)));
        if (gelu_built()) {
          const auto [gy, gz] = kiln::ops::linear_gelu_forward(x, w, b);
          REQUIRE(at::equal(gz, unfused));
          REQUIRE(at::equal(gy, kiln::ops::gelu(unfused)));
          REQUIRE(at::equal(kiln::ops::linear_gelu(x, w, b), gy));
        }
      } else if (!transposed) {
        CHECK(addmm == (on_onednn ? 0 : 2));
      }
      const auto tol = tolerance(at::kFloat, s.K);
      const auto ref = reference(in.x, in.w, in.b);
      KILN_REQUIRE_CLOSE(y, ref, tol.rtol, tol.atol);
      KILN_REQUIRE_CLOSE(r, at::relu(ref), tol.rtol, tol.atol);
    }
  }
}

TEST_CASE("the bias pass of every CPU build: bias, relu and gelu rows, tails, either stores, in place",
          "[ops][linear]") {
  using kiln::ops::Stores;
  using kiln::ops::cpu::BiasEpilogue;
  const auto passes = KILN_CPU_BUILDS(bias_epilogue);
  const auto gelus = KILN_CPU_BUILDS(gelu_forward);  // each build against its own gelu and relu
  const auto relus = KILN_CPU_BUILDS(relu_forward);
  REQUIRE((passes.size() == gelus.size() && passes.size() == relus.size()));
  for (size_t k = 0; k < passes.size(); ++k) {
    const auto& [name, pass] = passes[k];
    for (const int64_t n : {1, 13, 16, 37, 64}) {
      for (const auto stores : {Stores::kCached, Stores::kStreaming}) {
        INFO(name << " build, n " << n << ", streaming " << (stores == Stores::kStreaming));
        const int64_t rows = 7;
        auto t = at::randn({rows, n}) * 3;
        t[0][0] = NAN;  // kept by relu and gelu
        t[1][0] = -0.0f;
        auto b = at::randn({n});
        b[0] = 0.0f;  // -0 + 0 = +0: the sum's own sign, as at::add gives it
        const auto sum = at::add(t, b);
        // rows 2..5 only: the others stay as they were
        const auto check_rows = [&](const at::Tensor& out, const at::Tensor& expected, const at::Tensor& before) {
          REQUIRE(at::equal(out.narrow(0, 0, 2).isnan(), before.narrow(0, 0, 2).isnan()));
          REQUIRE(at::equal(at::nan_to_num(out.narrow(0, 0, 2)), at::nan_to_num(before.narrow(0, 0, 2))));
          const auto mid = out.narrow(0, 2, 4), want = expected.narrow(0, 2, 4);
          REQUIRE(at::equal(mid, want));
          REQUIRE(at::equal(out.narrow(0, 6, 1), before.narrow(0, 6, 1)));
        };
        // all rows, then rows 2..5 alone
        for (const bool some : {false, true}) {
          const int64_t r0 = some ? 2 : 0, r1 = some ? 6 : rows;
          auto z = t.clone();
          pass(BiasEpilogue::kBias, b.data_ptr<float>(), z.data_ptr<float>(), nullptr, r0, r1, n, stores);
          auto zr = t.clone();
          pass(BiasEpilogue::kBiasRelu, b.data_ptr<float>(), zr.data_ptr<float>(), nullptr, r0, r1, n, stores);
          auto want_relu = at::empty_like(sum);
          relus[k].second(kiln::ops::DType::kFloat, sum.data_ptr<float>(), want_relu.data_ptr<float>(), sum.numel(),
                          Stores::kCached);
          auto zg = t.clone();
          auto yg = at::full({rows, n}, 7.0f);
          pass(BiasEpilogue::kBiasGelu, b.data_ptr<float>(), zg.data_ptr<float>(), yg.data_ptr<float>(), r0, r1, n,
               stores);
          auto want_gelu = at::empty_like(sum);
          gelus[k].second(kiln::ops::DType::kFloat, sum.data_ptr<float>(), want_gelu.data_ptr<float>(), sum.numel(),
                          Stores::kCached);
          auto zi = t.clone();  // in place: y is z
          pass(BiasEpilogue::kBiasGelu, b.data_ptr<float>(), zi.data_ptr<float>(), zi.data_ptr<float>(), r0, r1, n,
               stores);
          if (!some) {
            REQUIRE(at::equal(z.isnan(), sum.isnan()));
            REQUIRE(at::equal(at::nan_to_num(z), at::nan_to_num(sum)));
            REQUIRE(std::signbit(z[1][0].item<float>()) == std::signbit(sum[1][0].item<float>()));
            REQUIRE(at::equal(zr.isnan(), want_relu.isnan()));
            REQUIRE(at::equal(at::nan_to_num(zr), at::nan_to_num(want_relu)));
            REQUIRE(at::equal(at::nan_to_num(zg), at::nan_to_num(sum)));
            REQUIRE(at::equal(yg.isnan(), want_gelu.isnan()));
            REQUIRE(at::equal(at::nan_to_num(yg), at::nan_to_num(want_gelu)));
            REQUIRE(at::equal(at::nan_to_num(zi), at::nan_to_num(want_gelu)));
          } else {
            check_rows(z, sum, t);
            check_rows(zr, want_relu, t);
            check_rows(zg, sum, t);
            check_rows(yg, want_gelu, at::full({rows, n}, 7.0f));
            check_rows(zi, want_gelu, t);
          }
        }
      }
    }
  }
}

TEST_CASE("a bfloat16 linear with a bias runs on oneDNN's inner product where bf16 runs natively, and matches float64",
          "[ops][linear]") {
  // The bias goes into the inner product's accumulator instead of at::addmm's copy of
  // it into every row, where libtorch has the op and this CPU runs oneDNN's bf16
  // kernels (its matmul passed kiln's check); without a bias at::mm stays. Odd sizes,
  // a transposed x, strided x, w and b, and empty batches.
  static thread_local int inner = 0, blas = 0;
  const auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        const std::string_view name = fn.name();
        if (name.starts_with("mkldnn::_linear_pointwise")) ++inner;
        if (name.starts_with("aten::mm") || name.starts_with("aten::addmm")) ++blas;
        return nullptr;
      }).needsInputs(false));
  // Run as a float32 product (linear_reduced_in_float32), it reaches the inner product
  // only with KILN_CPU_LINEAR=onednn: 37·300·129 is below float32's threshold there.
  const bool routed = kiln::ops::linear_reduced_in_float32();
  const bool expect_inner =
      routed ? onednn_forced() && has_inner_product()
             : !blas_forced() && has_inner_product() && kiln::ops::linear_onednn_matmul_available();
  const bool expect_inner_unbiased = routed && onednn_forced() && has_inner_product();
  for (const bool transposed : {false, true}) {  // else x stepped: x[:, ::2]
    INFO("x transposed " << transposed << ", inner product expected " << expect_inner);
    const auto in = sample({37, 300, 129}, at::kBFloat16);
    const auto x = transposed ? in.x.t().contiguous().t() : stepped(in.x);
    const auto w = stepped(in.w), b = stepped(in.b);  // strides of 2
    REQUIRE((!w.is_contiguous() && !b.is_contiguous()));
    const auto tol = tolerance(at::kBFloat16, 300);
    inner = blas = 0;
    const auto y = kiln::ops::linear(x, w, b);
    CHECK(inner == (expect_inner ? 1 : 0));
    CHECK(inner + blas == 1);
    REQUIRE(y.scalar_type() == at::kBFloat16);
    KILN_REQUIRE_CLOSE(y, reference(in.x, in.w, in.b), tol.rtol, tol.atol);
    if (gelu_built())
      KILN_REQUIRE_CLOSE(kiln::ops::linear_gelu(x, w, b), at::gelu(reference(in.x, in.w, in.b), "tanh"),
                         tol.rtol, tol.atol);
    const auto yb = kiln::ops::linear(in.x, in.w, b);  // x and w plain, b stepped
    KILN_REQUIRE_CLOSE(yb, reference(in.x, in.w, in.b), tol.rtol, tol.atol);
    inner = blas = 0;
    const auto y0 = kiln::ops::linear(x, w, std::nullopt);
    CHECK(inner == (expect_inner_unbiased ? 1 : 0));
    KILN_REQUIRE_CLOSE(y0, reference(in.x, in.w, at::zeros({129}, at::kBFloat16)), tol.rtol, tol.atol);
  }
  const auto in = sample({4, 8, 3}, at::kBFloat16);
  REQUIRE(kiln::ops::linear(in.x.slice(0, 0, 0), in.w, in.b).sizes() == at::IntArrayRef{0, 3});
  REQUIRE(kiln::ops::linear(in.x.slice(1, 0, 0), in.w.slice(1, 0, 0), in.b).equal(
      in.b.expand({4, 3})));  // K = 0: the bias alone
  at::removeCallback(handle);
}

TEST_CASE("bfloat16 and float16 products on a CPU without fast ones are float32's, rounded once",
          "[ops][linear]") {
  // Where this CPU has no fast bf16 products (or KILN_CPU_REDUCED_PRODUCTS=float32) the
  // operands are cast up, the float32 product runs, and its result is rounded once: bit
  // for bit kiln's float32 linear of the same values, cast down. Elsewhere (=native, or
  // AMX, AMD's AVX512-BF16) no cast runs. Rows below 16, 16-48 (float32's transposed
  // path) and above; with and without a bias; strided operands; each gradient alone.
  static thread_local int casts = 0;
  const auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        if (std::string_view(fn.name()) == "kiln::cast") ++casts;
        return nullptr;
      }).needsInputs(false));
  const bool routed = kiln::ops::linear_reduced_in_float32();
  if (env_is("KILN_CPU_REDUCED_PRODUCTS", "float32")) CHECK(routed);
  if (env_is("KILN_CPU_REDUCED_PRODUCTS", "native")) CHECK_FALSE(routed);
  if (!env_is("KILN_CPU_REDUCED_PRODUCTS", "native") && !env_is("KILN_CPU_REDUCED_PRODUCTS", "float32")) {
    const auto kind = kiln::ops::cpu_bf16_matmul();
    CHECK(routed == (kind == kiln::ops::CpuBf16Matmul::kEmulated ||
                     kind == kiln::ops::CpuBf16Matmul::kAvx512Bf16OnePort));
  }
  const auto f = [](const at::Tensor& t) { return t.defined() ? t.to(at::kFloat) : t; };
  for (const auto dtype : {at::kBFloat16, at::kHalf}) {
    for (const auto& s : std::vector<Shape>{{5, 33, 17}, {37, 300, 129}, {70, 200, 96}}) {
      for (const bool bias : {true, false}) {
        for (const bool strided : {false, true}) {
          INFO("dtype " << dtype << ", B " << s.B << ", K " << s.K << ", N " << s.N << ", bias " << bias
                        << ", strided " << strided << ", routed " << routed);
          auto in = sample(s, dtype);
          const auto x = strided ? stepped(in.x) : in.x, w = strided ? stepped(in.w) : in.w;
          const auto b = bias ? (strided ? stepped(in.b) : in.b) : at::Tensor();
          casts = 0;
          const auto y = kiln::ops::linear(x, w, opt(b));
          REQUIRE(y.scalar_type() == dtype);
          CHECK(casts == (routed ? (bias ? 4 : 3) : 0));  // x, w, b up; the result down
          const auto tol = tolerance(dtype, s.K);
          KILN_REQUIRE_CLOSE(y, reference(in.x, in.w, b.defined() ? in.b : at::Tensor()), tol.rtol, tol.atol);
          const auto g = at::randn({s.B, s.N}).to(dtype);
          const auto [dx, dw, db] = kiln::ops::linear_backward(g, x, w, {true, true, true});
          REQUIRE((dx.scalar_type() == dtype && dw.scalar_type() == dtype));
          REQUIRE(at::equal(db, at::sum(g, 0)));
          if (!routed) continue;
          const auto expect = kiln::ops::linear(f(x), f(w), opt(f(b))).to(dtype);
          REQUIRE(at::equal(y, expect));
          REQUIRE(at::equal(kiln::ops::linear_relu(x, w, opt(b)), at::relu(expect)));
          const auto [fx, fw, fb] = kiln::ops::linear_backward(f(g), f(x), f(w), {true, true, true});
          REQUIRE(at::equal(dx, fx.to(dtype)));
          REQUIRE(at::equal(dw, fw.to(dtype)));
          // One gradient alone: the other operand is there for its shape only.
          REQUIRE(at::equal(std::get<0>(kiln::ops::linear_backward(g, x, w, {true, false, false})), dx));
          REQUIRE(at::equal(std::get<1>(kiln::ops::linear_backward(g, x, w, {false, true, false})), dw));
        }
      }
    }
  }
  at::removeCallback(handle);
}

TEST_CASE("linear's backward computes only the gradients autograd needs", "[ops][linear]") {
  // Counts the matrix products the backward pass runs: a first layer fed with data
  // needs dw and db but no dx, a frozen layer only dx.
  static thread_local int products = 0;
  const auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        const std::string_view name = fn.name();  // oneDNN's inner product or the BLAS GEMM
        if (name.starts_with("aten::mm") || name.starts_with("mkldnn::_linear_pointwise") ||
            name == "kiln::onednn_matmul")
          ++products;
        return nullptr;
      }).needsInputs(false));
  const auto in = sample({6, 5, 4}, at::kFloat);
  const auto g = at::randn({6, 4});
  struct Want {
    bool x, w;
    int products;
  };
  for (const auto& want : {Want{false, true, 1}, Want{true, false, 1}, Want{true, true, 2}}) {
    INFO("x requires grad " << want.x << ", w requires grad " << want.w);
    const auto x = in.x.clone().requires_grad_(want.x), w = in.w.clone().requires_grad_(want.w);
    const auto b = in.b.clone().requires_grad_(true);
    const auto y = kiln::ops::linear(x, w, b);
    products = 0;
    y.backward(g);
    REQUIRE(products == want.products);
    REQUIRE(x.grad().defined() == want.x);
    REQUIRE(w.grad().defined() == want.w);
    KILN_REQUIRE_CLOSE(b.grad(), g.sum(0), 1e-6, 1e-6);
    if (want.x) KILN_REQUIRE_CLOSE(x.grad(), g.mm(in.w), 1e-5, 1e-5);
    if (want.w) KILN_REQUIRE_CLOSE(w.grad(), g.t().mm(in.x), 1e-5, 1e-5);
  }
  at::removeCallback(handle);
}

TEST_CASE("linear gradients match central differences", "[ops][linear]") {
  const auto in = sample({4, 6, 5}, at::kDouble);
  const auto x = in.x, w = in.w, b = in.b;
  for (const bool bias : {true, false}) {
    INFO("bias " << bias);
    const auto bb = bias ? opt(b) : std::nullopt;
    auto c = gradcheck([&](const at::Tensor& t) { return kiln::ops::linear(t, w, bb); }, x);
    INFO("x: " << c.report);
    REQUIRE(c.ok);
    c = gradcheck([&](const at::Tensor& t) { return kiln::ops::linear(x, t, bb); }, w);
    INFO("w: " << c.report);
    REQUIRE(c.ok);
  }
  const auto c = gradcheck([&](const at::Tensor& t) { return kiln::ops::linear(x, w, t); }, b);
  INFO("b: " << c.report);
  REQUIRE(c.ok);
  // Without bias autograd sees two inputs, and b gets no gradient.
  const auto xg = x.clone().requires_grad_(true);
  kiln::ops::linear(xg, w, std::nullopt).sum().backward();
  REQUIRE(xg.grad().defined());
}

TEST_CASE("linear backward is differentiable (double backward)", "[ops][linear]") {
  require_double_backward(&kiln::ops::linear);
}

TEST_CASE("linear_gelu gradients match central differences", "[ops][linear]") {
  if (!gelu_built_or_skip()) return;
  require_gradients(&kiln::ops::linear_gelu);
}

TEST_CASE("linear_gelu's backward takes dz and db from one pass on the CPU", "[ops][linear]") {
  // With the bias's gradient wanted (and no create_graph), dz = gelu'(z)·grad and its
  // column sums come from one bias_gelu_backward pass (a zero bias): no gelu_backward,
  // and no sum over dz's rows in linear_backward. Without a bias gradient, or with
  // create_graph, gelu_backward as before. The gradients match float64 either way.
  if (!gelu_built_or_skip()) return;
  const bool fused = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("kiln::bias_gelu_backward", "")
                         .hasKernelForDispatchKey(c10::DispatchKey::CPU);
  static thread_local int bias_pass = 0, gelu_pass = 0, row_sums = 0;
  const auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        const std::string_view name = fn.name();
        if (name == "kiln::bias_gelu_backward") ++bias_pass;
        if (name == "kiln::gelu_backward") ++gelu_pass;
        if (name == "aten::sum") {  // a sum over the (37, 24) gradient's rows
          const auto inputs = fn.inputs();
          if (!inputs.empty() && inputs[0].isTensor() && inputs[0].toTensor().size(0) == 37) ++row_sums;
        }
        return nullptr;
      }).needsInputs(true));
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    for (const bool want_db : {true, false}) {
      INFO("dtype " << dtype << ", db wanted " << want_db << ", fused pass built " << fused);
      const auto in = sample({37, 20, 24}, dtype);
      const auto x = in.x.clone().requires_grad_(true), w = in.w.clone().requires_grad_(true);
      const auto b = in.b.clone().requires_grad_(want_db);
      const auto g = at::randn({37, 24}).to(dtype);
      const auto y = kiln::ops::linear_gelu(x, w, b);
      bias_pass = gelu_pass = row_sums = 0;
      y.backward(g);
      const bool one_pass = fused && want_db;
      CHECK((bias_pass > 0) == one_pass);  // (an op records once per dispatch level it passes)
      CHECK((gelu_pass > 0) == !one_pass);
      CHECK(row_sums == (one_pass || !want_db ? 0 : 1));
      // float64 reference from the same rounded inputs
      const auto xd = in.x.to(at::kDouble).requires_grad_(true), wd = in.w.to(at::kDouble).requires_grad_(true);
      const auto bd = in.b.to(at::kDouble).requires_grad_(true);
      at::gelu(at::linear(xd, wd, bd), "tanh").backward(g.to(at::kDouble));
      const auto tol = tolerance(dtype, 37);
      KILN_REQUIRE_CLOSE(x.grad(), xd.grad(), tol.rtol, tol.atol);
      KILN_REQUIRE_CLOSE(w.grad(), wd.grad(), tol.rtol, tol.atol);
      if (want_db) KILN_REQUIRE_CLOSE(b.grad(), bd.grad(), tol.rtol, tol.atol);
      else REQUIRE_FALSE(b.grad().defined());
    }
  }
  // create_graph: the pass is not differentiable, so gelu_backward runs
  const auto in = sample({37, 20, 24}, at::kDouble);
  const auto x = in.x.clone().requires_grad_(true), b = in.b.clone().requires_grad_(true);
  const auto y = kiln::ops::linear_gelu(x, in.w, b);
  bias_pass = gelu_pass = 0;
  const auto grads = torch::autograd::grad({y}, {x, b}, {at::randn({37, 24}, at::kDouble)},
                                           /*retain_graph=*/true, /*create_graph=*/true);
  CHECK(bias_pass == 0);
  CHECK(gelu_pass >= 1);
  at::removeCallback(handle);
}

TEST_CASE("linear_gelu backward is differentiable (double backward)", "[ops][linear]") {
  if (!gelu_built_or_skip()) return;
  const auto in = sample({4, 6, 5}, at::kDouble);
  const auto x = in.x.clone().requires_grad_(true), w = in.w.clone().requires_grad_(true);
  const auto v = at::randn({4, 5}, at::kDouble);
  // d/dx <linear_gelu(x, w, b), v> depends on w through gelu'(z) and through w itself.
  const auto dx_of = [&](const at::Tensor& xx, const at::Tensor& ww, const at::Tensor& bb) {
    const auto y = kiln::ops::linear_gelu(xx, ww, bb);
    return torch::autograd::grad({y}, {x}, {v}, /*retain_graph=*/true, /*create_graph=*/true)[0];
  };
  const auto b = in.b.clone().requires_grad_(true);
  const std::vector<std::pair<std::string, kiln::test::Closeness>> checks = {
      {"dx(w)", gradcheck([&](const at::Tensor& t) { return dx_of(x, t, b); }, in.w)},
      {"dx(b)", gradcheck([&](const at::Tensor& t) { return dx_of(x, w, t); }, in.b)},
      {"dx(x)", gradcheck([&](const at::Tensor& t) {
         const auto xt = t.requires_grad() ? t : t.clone().requires_grad_(true);
         const auto y = kiln::ops::linear_gelu(xt, w, b);
         return torch::autograd::grad({y}, {xt}, {v}, true, true)[0];
       }, in.x)},
  };
  for (const auto& [name, c] : checks) {
    INFO(name << ": " << c.report);
    REQUIRE(c.ok);
  }
}

TEST_CASE("linear is correct on non-contiguous x and w", "[ops][linear]") {
  const auto xt = at::randn({24, 10}), wt = at::randn({24, 7}), b = at::randn({7});
  const auto xw = at::randn({10, 48}), ww = at::randn({7, 48});
  // Transposed views, strided slices, and one of each.
  const std::vector<std::pair<at::Tensor, at::Tensor>> cases = {
      {xt.t(), wt.t()}, {xw.slice(1, 0, 48, 2), ww.slice(1, 0, 48, 2)}, {xt.t(), ww.slice(1, 0, 48, 2)}};
  for (const auto& [x, w] : cases) {
    REQUIRE_FALSE(x.is_contiguous());
    REQUIRE_FALSE(w.is_contiguous());
    const auto tol = tolerance(at::kFloat, x.size(1));
    KILN_REQUIRE_CLOSE(kiln::ops::linear(x, w, b), reference(x, w, b), tol.rtol, tol.atol);
    KILN_REQUIRE_CLOSE(kiln::ops::linear_gelu(x, w, b), at::gelu(reference(x, w, b), "tanh"),
                       tol.rtol, tol.atol);
    const auto xg = x.clone().requires_grad_(true), wg = w.clone().requires_grad_(true);
    const auto g = at::randn({x.size(0), w.size(0)}).t().contiguous().t();  // a transposed gradient
    kiln::ops::linear(xg, wg, b).backward(g);
    KILN_REQUIRE_CLOSE(xg.grad(), g.mm(w), tol.rtol, tol.atol);
    KILN_REQUIRE_CLOSE(wg.grad(), g.t().mm(x), tol.rtol, tol.atol);
  }
}

TEST_CASE("linear rejects bad input with a message naming the argument", "[ops][linear]") {
  const auto x = at::randn({4, 784}), w = at::randn({10, 784}), b = at::randn({10});
  REQUIRE_THROWS_WITH(kiln::ops::linear(at::randn({784}), w, b),
                      Catch::Contains("kiln::linear: x: expected a 2-D tensor (B, K), got shape [784]"));
  REQUIRE_THROWS_WITH(
      kiln::ops::linear(x, at::randn({10, 783}), b),
      Catch::Contains("kiln::linear: w: expected shape (N, K) with K = 784 (x.size(1)), got [10, 783]"));
  REQUIRE_THROWS_WITH(
      kiln::ops::linear(x, w, at::randn({1, 10})),
      Catch::Contains("kiln::linear: b: expected shape (N) with N = 10 (w.size(0)), got [1, 10]"));
  REQUIRE_THROWS_WITH(kiln::ops::linear(x, w.to(at::kDouble), b),
                      Catch::Contains("kiln::linear: w: expected dtype Float (the dtype of x), got Double"));
  REQUIRE_THROWS_WITH(kiln::ops::linear(x, w, b.to(at::kHalf)),
                      Catch::Contains("kiln::linear: b: expected dtype Float (the dtype of x), got Half"));
  REQUIRE_THROWS_WITH(kiln::ops::linear(x.to(at::kInt), w, b),
                      Catch::Contains("kiln::linear: x: expected a floating-point tensor"));
  REQUIRE_THROWS_WITH(kiln::ops::linear_gelu(x, at::randn({10, 783}), b),
                      Catch::Contains("kiln::linear_gelu: w: expected shape (N, K) with K = 784"));
  REQUIRE_THROWS_WITH(kiln::ops::linear_relu(x, w, at::randn({11})),
                      Catch::Contains("kiln::linear_relu: b: expected shape (N) with N = 10 (w.size(0)), got [11]"));
  REQUIRE_THROWS_WITH(kiln::ops::linear_relu(x.to(at::kDouble), w, b),
                      Catch::Contains("kiln::linear_relu: w: expected dtype Double (the dtype of x), got Float"));
  REQUIRE_THROWS_WITH(
      kiln::ops::linear_backward(at::randn({4, 9}), x, w),
      Catch::Contains("kiln::linear_backward: grad: expected shape (B, N) = [4, 10] (x.size(0), "
                      "w.size(0)), got [4, 9]"));
}

TEST_CASE("linear on CUDA matches CPU for every dtype", "[ops][linear][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  const bool gelu = gelu_built();
  if (!gelu) WARN("kiln::gelu_backward is not built: linear_gelu's backward is not compared");
  for (const auto dtype : kFloatingDtypes) {
    for (const auto& s : kShapes) {
      for (const bool bias : {true, false}) {
        INFO("dtype " << dtype << ", B " << s.B << ", K " << s.K << ", N " << s.N << ", bias " << bias);
        auto in = sample(s, dtype);
        if (!bias) in.b = at::Tensor();
        const auto g = at::randn({s.B, s.N}).to(dtype);
        // The matrix products (z, linear) and, apart, the GELU outputs of cuBLASLt's
        // epilogue, whose tanh accuracy cuBLASLt does not document: 1e-3 relative at most.
        const auto products = [&](const std::vector<at::Tensor>& t) -> std::vector<at::Tensor> {
          return {kiln::ops::linear(t[0], t[1], opt(t[2])),
                  std::get<1>(kiln::ops::linear_gelu_forward(t[0], t[1], opt(t[2]))),
                  kiln::ops::linear_relu(t[0], t[1], opt(t[2]))};  // |relu(a) − relu(b)| ≤ |a − b|
        };
        const auto gelus = [&](const std::vector<at::Tensor>& t) -> std::vector<at::Tensor> {
          return {kiln::ops::linear_gelu(t[0], t[1], opt(t[2])),
                  std::get<0>(kiln::ops::linear_gelu_forward(t[0], t[1], opt(t[2])))};
        };
        const auto tol = tolerance(dtype, s.K);
        const Tolerance gelu_tol{std::max(tol.rtol, 1e-3), std::max(tol.atol, 1e-3)};
        // Transposed views of x and w reach cuBLASLt as transposed operands.
        const auto transposed = [](const std::vector<at::Tensor>& t) {
          return std::vector<at::Tensor>{t[0].t().contiguous().t(), t[1].t().contiguous().t(), t[2]};
        };
        for (const bool transpose : {false, true}) {
          INFO("transposed x and w: " << transpose);
          const auto prep = [&](const std::vector<at::Tensor>& t) { return transpose ? transposed(t) : t; };
          kiln::test::require_cuda_matches_cpu([&](const auto& t) { return products(prep(t)); },
                                               {in.x, in.w, in.b}, tol);
          kiln::test::require_cuda_matches_cpu([&](const auto& t) { return gelus(prep(t)); },
                                               {in.x, in.w, in.b}, gelu_tol);
        }
        const auto backward = [&](const std::vector<at::Tensor>& t) -> std::vector<at::Tensor> {
          auto [dx, dw, db] = kiln::ops::linear_backward(t[0], t[1], t[2], {true, true, bias});
          return bias ? std::vector<at::Tensor>{dx, dw, db} : std::vector<at::Tensor>{dx, dw};
        };
        kiln::test::require_cuda_matches_cpu(backward, {g, in.x, in.w},
                                             tolerance(dtype, std::max(s.B, s.N)));
        if (!gelu) continue;
        // Through autograd: linear_gelu's backward on both devices.
        const auto grads = [&](const std::vector<at::Tensor>& t) -> std::vector<at::Tensor> {
          const auto x = t[0].clone().requires_grad_(true), w = t[1].clone().requires_grad_(true);
          kiln::ops::linear_gelu(x, w, opt(t[2])).backward(t[3]);
          return {x.grad(), w.grad()};
        };
        kiln::test::require_cuda_matches_cpu(grads, {in.x, in.w, in.b, g},
                                             tolerance(dtype, std::max({s.B, s.K, s.N})));
        // linear_relu's backward (the mask from the output of cuBLASLt's RELU epilogue).
        const auto relu_grads = [&](const std::vector<at::Tensor>& t) -> std::vector<at::Tensor> {
          const auto x = t[0].clone().requires_grad_(true), w = t[1].clone().requires_grad_(true);
          kiln::ops::linear_relu(x, w, opt(t[2])).backward(t[3]);
          return {x.grad(), w.grad()};
        };
        kiln::test::require_cuda_matches_cpu(relu_grads, {in.x, in.w, in.b, g},
                                             tolerance(dtype, std::max({s.B, s.K, s.N})));
      }
    }
  }
}

namespace {
// `t` copied into a CUDA buffer one element past an aligned start: contiguous, but
// its address is only element-size aligned (2 bytes for the half types).
at::Tensor misaligned_cuda(const at::Tensor& t) {
  auto buffer = at::empty({t.numel() + 1}, t.options().device(at::kCUDA));
  return buffer.narrow(0, 1, t.numel()).view(t.sizes()).copy_(t);
}
}  // namespace

TEST_CASE("linear on CUDA with misaligned operands and bias, and a split-K shape, matches CPU",
          "[ops][linear][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  // cuBLASLt's preference has no bias alignment: the bias must lower the output's,
  // else a vector load of a misaligned bias can fault. K = 8192 with B = N = 16
  // invites split-K, whose partial sums must be reduced in float.
  for (const auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    for (const Shape s : {Shape{16, 64, 64}, Shape{16, 8192, 16}}) {
      INFO("dtype " << dtype << ", B " << s.B << ", K " << s.K << ", N " << s.N);
      const auto in = sample(s, dtype);
      const auto expected = reference(in.x, in.w, in.b);
      const auto tol = tolerance(dtype, s.K);
      for (const bool shift_x : {false, true}) {
        const auto x = shift_x ? misaligned_cuda(in.x) : in.x.cuda();
        const auto w = in.w.cuda(), b = misaligned_cuda(in.b);
        REQUIRE(reinterpret_cast<uintptr_t>(b.const_data_ptr()) % 16 != 0);
        const auto y = kiln::ops::linear(x, w, b);
        const auto [g, z] = kiln::ops::linear_gelu_forward(x, w, b);
        KILN_REQUIRE_CLOSE(y.cpu().to(at::kDouble), expected, tol.rtol, tol.atol);
        KILN_REQUIRE_CLOSE(z.cpu().to(at::kDouble), expected, tol.rtol, tol.atol);
        REQUIRE(g.isfinite().all().item<bool>());
      }
    }
  }
  torch::cuda::synchronize();  // a fault in the launches above surfaces here at the latest
}

TEST_CASE("under CPU autocast linear, linear_gelu and linear_relu run in bfloat16", "[ops][linear][autocast]") {
  const auto x = at::randn({8, 16}), w = at::randn({4, 16}), b = at::randn({4});
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  const auto y = kiln::ops::linear(x, w, b);
  const auto yg = kiln::ops::linear_gelu(x, w, b);
  const auto yr = kiln::ops::linear_relu(x, w, b);
  const auto yd = kiln::ops::linear(x.to(at::kDouble), w.to(at::kDouble), b.to(at::kDouble));
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  REQUIRE(y.scalar_type() == at::kBFloat16);
  REQUIRE(yg.scalar_type() == at::kBFloat16);
  REQUIRE(yr.scalar_type() == at::kBFloat16);
  REQUIRE(yd.scalar_type() == at::kDouble);  // autocast leaves float64 alone
  const auto xb = x.to(at::kBFloat16), wb = w.to(at::kBFloat16), bb = b.to(at::kBFloat16);
  const auto tol = tolerance(at::kBFloat16, 16);
  KILN_REQUIRE_CLOSE(y, reference(xb, wb, bb), tol.rtol, tol.atol);
  KILN_REQUIRE_CLOSE(yg, at::gelu(reference(xb, wb, bb), "tanh"), tol.rtol, tol.atol);
  KILN_REQUIRE_CLOSE(yr, at::relu(reference(xb, wb, bb)), tol.rtol, tol.atol);
}
