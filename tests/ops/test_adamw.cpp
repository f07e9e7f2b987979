// kiln::fused_adamw_ against a plain-ATen AdamW step computed in float64: every
// dtype, many tensors of awkward sizes (split and batched across threads), tensors
// that are not contiguous, CUDA against CPU, and errors for lists that do not match.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "cpu_builds.h"
#include "fused_step_support.h"
#include "ops/adamw/adamw_kernel.h"
#include "ops/cpu_bf16.h"
#include "ops/cpu_memory.h"
#include "ops/multi_tensor_args.h"
#include "ops/ops.h"
#include "support.h"

namespace {

struct Hyper {
  double lr = 1e-2, beta1 = 0.9, beta2 = 0.99, weight_decay = 0.1, eps = 1e-8;
};

// torch::optim::AdamW's arithmetic, one tensor at a time, in place.
void reference_step(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v,
                    const Hyper& h, int64_t step) {
  p.mul_(1 - h.lr * h.weight_decay);
  m.mul_(h.beta1).add_(g, 1 - h.beta1);
  v.mul_(h.beta2).addcmul_(g, g, 1 - h.beta2);
  const double bc1 = 1 - std::pow(h.beta1, step), bc2 = 1 - std::pow(h.beta2, step);
  p.addcdiv_(m, (v.sqrt() / std::sqrt(bc2)).add_(h.eps), -h.lr / bc1);
}

struct Lists {
  std::vector<at::Tensor> p, g, m, v;
  Lists clone() const {
    Lists c;
    for (size_t i = 0; i < p.size(); ++i) {
      c.p.push_back(p[i].clone()), c.g.push_back(g[i].clone());
      c.m.push_back(m[i].clone()), c.v.push_back(v[i].clone());
    }
    return c;
  }
  Lists to(const at::TensorOptions& o) const {
    Lists c;
    for (size_t i = 0; i < p.size(); ++i) {
      c.p.push_back(p[i].to(o)), c.g.push_back(g[i].to(o));
      c.m.push_back(m[i].to(o)), c.v.push_back(v[i].to(o));
    }
    return c;
  }
};

// Tensors mid-training: random parameters and gradients, moments from earlier steps.
Lists random_lists(const std::vector<int64_t>& sizes, at::ScalarType dtype) {
  Lists l;
  for (const auto n : sizes) {
    const auto o = at::TensorOptions().dtype(dtype);
    l.p.push_back(at::randn({n}, o)), l.g.push_back(at::randn({n}, o));
    l.m.push_back(at::randn({n}, o) * 0.1), l.v.push_back(at::rand({n}, o) * 0.01);
  }
  return l;
}

void fused_step(Lists& l, const Hyper& h, int64_t step) {
  kiln::ops::fused_adamw_(l.p, l.g, l.m, l.v, h.lr, h.beta1, h.beta2, h.weight_decay, h.eps, step);
}

}  // namespace

TEST_CASE("fused_adamw_ matches a float64 AdamW step in every dtype, over many tensors of odd sizes",
          "[ops][adamw]") {
  // Sizes that are no multiple of any vector width; 70001 and the total exceed the
  // parallel grain, so tensors are both split and batched between threads.
  const std::vector<int64_t> sizes = {1, 7, 33, 1000, 70001, 5, 40000, 3};
  const Hyper h;
  for (const auto dtype : kiln::test::kFloatingDtypes) {
    INFO("dtype " << dtype);
    at::manual_seed(2);
    auto ours = random_lists(sizes, dtype);
    auto ref = ours.to(at::TensorOptions().dtype(at::kDouble));
    for (int64_t step = 1; step <= 3; ++step) {
      fused_step(ours, h, step);
      for (size_t i = 0; i < sizes.size(); ++i) reference_step(ref.p[i], ref.g[i], ref.m[i], ref.v[i], h, step);
      // Half types round every step, so the float64 trajectory drifts by a few roundings.
      auto tol = kiln::test::tolerance_for(dtype);
      for (size_t i = 0; i < sizes.size(); ++i) {
        INFO("step " << step << ", tensor " << i << " (" << sizes[i] << " elements)");
        KILN_REQUIRE_CLOSE(ours.p[i], ref.p[i], tol.rtol * step, tol.atol * step);
        KILN_REQUIRE_CLOSE(ours.m[i], ref.m[i], tol.rtol * step, tol.atol * step);
        KILN_REQUIRE_CLOSE(ours.v[i], ref.v[i], tol.rtol * step, tol.atol * step);
      }
    }
  }
}

TEST_CASE("fused_adamw_ updates tensors that are transposed, sliced or laid out unlike their parameter",
          "[ops][adamw]") {
  at::manual_seed(3);
  const Hyper h;
  Lists ours;
  // A transposed (dense, non-contiguous) parameter with moments of its layout
  // (zeros_like preserves it), as an optimizer makes them.
  ours.p.push_back(at::randn({8, 6}).t());
  ours.g.push_back(at::randn({8, 6}).t());
  ours.m.push_back(at::zeros_like(ours.p[0]));
  ours.v.push_back(at::zeros_like(ours.p[0]));
  // A strided slice (not dense), with contiguous gradient and moments.
  ours.p.push_back(at::randn({8, 12}).slice(1, 0, 12, 2));
  ours.g.push_back(at::randn({8, 6}));
  ours.m.push_back(at::randn({8, 6}) * 0.1);
  ours.v.push_back(at::rand({8, 6}) * 0.01);
  // A contiguous parameter whose moment is a transposed view of other memory.
  ours.p.push_back(at::randn({5, 7}));
  ours.g.push_back(at::randn({5, 7}));
  ours.m.push_back(at::zeros({7, 5}).t());
  ours.v.push_back(at::zeros({7, 5}).t());
  auto ref = ours.clone();
  for (int64_t step = 1; step <= 2; ++step) {
    fused_step(ours, h, step);
    for (size_t i = 0; i < ref.p.size(); ++i) reference_step(ref.p[i], ref.g[i], ref.m[i], ref.v[i], h, step);
  }
  for (size_t i = 0; i < ref.p.size(); ++i) {
    INFO("tensor " << i);
    KILN_REQUIRE_CLOSE(ours.p[i], ref.p[i], 1e-5, 1e-6);
    KILN_REQUIRE_CLOSE(ours.m[i], ref.m[i], 1e-5, 1e-6);
    KILN_REQUIRE_CLOSE(ours.v[i], ref.v[i], 1e-5, 1e-6);
  }
  // The slice's update landed in the memory of the tensor it views.
  REQUIRE(ours.p[1].is_view());
  REQUIRE(!ours.p[1].is_contiguous());
}

TEST_CASE("fused_adamw_ on CUDA matches the CPU kernel, over more tensors than one launch takes",
          "[ops][adamw][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  // 151 tensors (more than the 64 of one launch), odd sizes; tensor 3 is moved to
  // an offset of one element, so its pointers are not 16-byte aligned.
  std::vector<int64_t> sizes;
  for (int i = 0; i < 150; ++i) sizes.push_back(1 + (i * 7919) % 9000);
  sizes.push_back(300000);
  const size_t n = sizes.size();
  const Hyper h;
  const auto f = [&](const std::vector<at::Tensor>& t) {
    std::vector<at::Tensor> lists[4];
    for (size_t k = 0; k < 4; ++k) {
      lists[k].assign(t.begin() + k * n, t.begin() + (k + 1) * n);
      auto shifted = at::empty({sizes[3] + 1}, t[0].options()).narrow(0, 1, sizes[3]);
      lists[k][3] = shifted.copy_(lists[k][3]);
    }
    kiln::ops::fused_adamw_(lists[0], lists[1], lists[2], lists[3], h.lr, h.beta1, h.beta2,
                            h.weight_decay, h.eps, 5);
    std::vector<at::Tensor> out;
    for (const size_t k : {0, 2, 3}) out.insert(out.end(), lists[k].begin(), lists[k].end());
    return out;
  };
  for (const auto dtype : kiln::test::kFloatingDtypes) {
    INFO("dtype " << dtype);
    at::manual_seed(4);
    const auto l = random_lists(sizes, dtype);
    std::vector<at::Tensor> inputs;
    for (const auto* list : {&l.p, &l.g, &l.m, &l.v})
      inputs.insert(inputs.end(), list->begin(), list->end());
    kiln::test::require_cuda_matches_cpu(f, inputs, kiln::test::tolerance_for(dtype));
  }
}

TEST_CASE("fused_adamw_ names the list, the index and the mismatch of bad arguments",
          "[ops][adamw]") {
  auto l = random_lists({4, 6}, at::kFloat);
  const auto call = [](Lists x, int64_t step = 1) {
    kiln::ops::fused_adamw_(x.p, x.g, x.m, x.v, 1e-3, 0.9, 0.999, 0.0, 1e-8, step);
  };
  auto short_grads = l.clone();
  short_grads.g.pop_back();
  REQUIRE_THROWS_WITH(call(short_grads), Catch::Contains("expected lists of one length, got 2 params, 1 grads"));
  auto bad_shape = l.clone();
  bad_shape.v[1] = at::zeros({5});
  REQUIRE_THROWS_WITH(call(bad_shape), Catch::Contains("exp_avg_sqs[1]: expected shape [6]") &&
                                           Catch::Contains("got [5]"));
  auto bad_dtype = l.clone();
  bad_dtype.g[0] = bad_dtype.g[0].to(at::kDouble);
  REQUIRE_THROWS_WITH(call(bad_dtype), Catch::Contains("grads[0]: expected dtype Float"));
  auto mixed = l.clone();
  for (auto* list : {&mixed.p, &mixed.g, &mixed.m, &mixed.v}) (*list)[1] = (*list)[1].to(at::kDouble);
  REQUIRE_THROWS_WITH(call(mixed), Catch::Contains("params[1]: expected dtype Float"));
  REQUIRE_THROWS_WITH(call(l, 0), Catch::Contains("step: expected >= 1"));
  // Under grad mode a parameter that requires grad is refused: the step is not differentiable.
  auto leaf = l.clone();
  leaf.p[0].requires_grad_(true);
  c10::AutoGradMode grad_on(true);
  REQUIRE_THROWS_WITH(call(leaf), Catch::Contains("params[0] requires grad") &&
                                      Catch::Contains("NoGradGuard"));
}

TEST_CASE("fused_adamw_'s CPU kernel gives the same bits with its software prefetch as without, in every build",
          "[ops][adamw]") {
  kiln::test::require_prefetch_changes_no_bit(KILN_CPU_BUILDS(adamw_update),
                                              kiln::ops::adamw_coefficients(0.1, 0.9, 0.999, 0.01, 1e-8, 3), 4);
}

TEST_CASE("a fused step prefetches in software from 48 MiB moved on an Intel CPU with 2 MiB of L2 a core only, "
          "its bytes every list read and every written one stored", "[ops][adamw]") {
  using kiln::ops::Reads;
  using kiln::ops::prefetch_reads;
  using kiln::ops::prefetch_reads_for;
  constexpr int64_t kAt = kiln::ops::kPrefetchThresholdBytes, kL2 = kiln::ops::kPrefetchL2Bytes;
  CHECK(kL2 == int64_t{2} << 20);
  CHECK(prefetch_reads_for("GenuineIntel", kL2, kAt) == Reads::kAhead);
  CHECK(prefetch_reads_for("GenuineIntel", kL2, int64_t{1} << 40) == Reads::kAhead);
  CHECK(prefetch_reads_for("GenuineIntel", int64_t{4} << 20, kAt) == Reads::kAhead);
  CHECK(prefetch_reads_for("GenuineIntel", kL2, kAt - 1) == Reads::kHardware);
  CHECK(prefetch_reads_for("GenuineIntel", kL2, 0) == Reads::kHardware);
  // The Ice Lake Xeon (1.25 MiB a core) ran AdamW slower with it; an unknown L2 (0) gets none.
  CHECK(prefetch_reads_for("GenuineIntel", int64_t{1280} << 10, int64_t{1} << 40) == Reads::kHardware);
  CHECK(prefetch_reads_for("GenuineIntel", kL2 - 1, kAt) == Reads::kHardware);
  CHECK(prefetch_reads_for("GenuineIntel", 0, int64_t{1} << 40) == Reads::kHardware);
  // On the Zen 4 EPYC it slowed the loops.
  CHECK(prefetch_reads_for("AuthenticAMD", kL2, kAt) == Reads::kHardware);
  CHECK(prefetch_reads_for("AuthenticAMD", int64_t{1} << 20, int64_t{1} << 40) == Reads::kHardware);
  CHECK(prefetch_reads_for("", kL2, int64_t{1} << 40) == Reads::kHardware);
  // This machine's L2, where sysfs names one: a level-2 cache no larger than the last level.
  const int64_t l2 = kiln::ops::l2_bytes();
  CHECK(l2 >= 0);
  if (l2 > 0) CHECK(l2 <= kiln::ops::llc_bytes());
  const char* env = std::getenv("KILN_CPU_PREFETCH");
  if (env == nullptr || std::string(env) == "auto") {
    for (const int64_t bytes : {int64_t{0}, kAt - 1, kAt, int64_t{1} << 40})
      CHECK(prefetch_reads(bytes) == prefetch_reads_for(kiln::ops::cpu_vendor(), l2, bytes));
  }
  // AdamW reads p, g, m, v and writes p, m, v: 28 bytes a float32 element, 14 a bf16 one.
  for (const auto& [dtype, per_element] : {std::pair{at::kFloat, 28}, std::pair{at::kBFloat16, 14}}) {
    auto l = kiln::test::random_lists({5, 0, 1000}, dtype, 4);
    const auto a = kiln::ops::multi_tensor_args(
        "test", {{"params", l[0], true}, {"grads", l[1], false}, {"exp_avgs", l[2], true}, {"exp_avg_sqs", l[3], true}});
    CHECK(a.written == 3);
    CHECK(a.bytes() == 1005 * per_element);
  }
}
