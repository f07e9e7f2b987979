// kiln::fused_sgd_ against torch::optim::SGD's plain-ATen arithmetic computed in
// float64: every dtype and awkward sizes, with and without momentum, dampening,
// Nesterov and weight decay, the first step's buffer, layouts unlike the parameter,
// CUDA against CPU, and errors for bad lists.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "cpu_builds.h"
#include "fused_step_support.h"
#include "ops/ops.h"
#include "ops/sgd/sgd_kernel.h"

namespace {

using kiln::test::TensorLists;

struct Hyper {
  double lr = 0.05, momentum = 0.9, dampening = 0.1, weight_decay = 1e-2;
  bool nesterov = false;
};

// The settings the tests run: plain SGD, momentum with dampening and weight decay,
// Nesterov without weight decay.
const std::vector<Hyper> kSettings = {{0.05, 0.0, 0.0, 0.0, false},
                                      {0.05, 0.9, 0.1, 1e-2, false},
                                      {0.05, 0.9, 0.0, 0.0, true}};

// The buffers of random_lists are mid-training state, so these are later steps; the
// first step's own test is below, and kiln::optim::SGD's against torch::optim::SGD's.
kiln::test::FusedStep fused(const Hyper& h) {
  return [h](TensorLists& l) {
    const std::vector<at::Tensor> none;
    kiln::ops::fused_sgd_(l[0], l[1], h.momentum != 0 ? l[2] : none, h.lr, h.momentum, h.dampening,
                          h.weight_decay, h.nesterov, /*first_step=*/false);
  };
}

// torch::optim::SGD's arithmetic, one tensor at a time.
kiln::test::ReferenceStep reference(const Hyper& h) {
  return [h](TensorLists& l, size_t i) {
    auto& p = l[0][i];
    auto d = l[1][i];
    if (h.weight_decay != 0) d = d.add(p, h.weight_decay);
    if (h.momentum != 0) {
      auto& b = l[2][i];
      b.mul_(h.momentum).add_(d, 1 - h.dampening);
      d = h.nesterov ? d.add(b, h.momentum) : b;
    }
    p.add_(d, -h.lr);
  };
}

}  // namespace

TEST_CASE("fused_sgd_ matches a float64 SGD step in every dtype, with and without momentum, "
          "dampening, Nesterov and weight decay", "[ops][sgd]") {
  for (const auto& h : kSettings) {
    INFO("momentum " << h.momentum << ", dampening " << h.dampening << ", weight_decay "
                     << h.weight_decay << ", nesterov " << h.nesterov);
    kiln::test::require_matches_float64(fused(h), reference(h), h.momentum != 0 ? 3 : 2);
  }
}

TEST_CASE("fused_sgd_ updates tensors that are transposed, sliced or laid out unlike their parameter",
          "[ops][sgd]") {
  for (const auto& h : kSettings) {
    INFO("momentum " << h.momentum << ", nesterov " << h.nesterov);
    kiln::test::require_layouts_work(fused(h), reference(h), h.momentum != 0 ? 3 : 2);
  }
}

TEST_CASE("fused_sgd_ on CUDA matches the CPU kernel, over more tensors than one launch takes",
          "[ops][sgd][cuda]") {
  for (const auto& h : kSettings) kiln::test::require_cuda_matches_cpu_step(fused(h), h.momentum != 0 ? 3 : 2);
}

TEST_CASE("fused_sgd_'s first step sets the buffer to the update without reading it", "[ops][sgd]") {
  TensorLists l{{at::ones({5})}, {at::full({5}, 2.0f)}, {at::full({5}, NAN)}};
  kiln::ops::fused_sgd_(l[0], l[1], l[2], 0.5, 0.9, 0.5, 0.0, false, /*first_step=*/true);
  REQUIRE(at::equal(l[2][0], at::full({5}, 2.0f)));
  REQUIRE(at::equal(l[0][0], at::zeros({5})));
}

TEST_CASE("fused_sgd_ names the list, the index and the mismatch of bad arguments", "[ops][sgd]") {
  at::manual_seed(6);
  auto l = kiln::test::random_lists({4, 6}, at::kFloat, 3);
  const auto call = [](const TensorLists& x, double momentum = 0.9) {
    kiln::ops::fused_sgd_(x[0], x[1], x[2], 0.1, momentum, 0.0, 0.0, false, false);
  };
  auto short_buffers = l;
  short_buffers[2].pop_back();
  REQUIRE_THROWS_WITH(call(short_buffers),
                      Catch::Contains("kiln::fused_sgd_: expected lists of one length, got 2 params, "
                                      "2 grads and 1 momentum_buffers"));
  REQUIRE_THROWS_WITH(call(l, 0.0),
                      Catch::Contains("momentum_buffers: expected none with momentum 0, got 2"));
  REQUIRE_THROWS_WITH(call(l, -1.0), Catch::Contains("momentum: expected >= 0, got -1"));
  auto bad_dtype = l;
  bad_dtype[1][0] = bad_dtype[1][0].to(at::kDouble);
  REQUIRE_THROWS_WITH(call(bad_dtype), Catch::Contains("grads[0]: expected dtype Float"));
}

TEST_CASE("fused_sgd_'s CPU kernel gives the same bits with its software prefetch as without, in every build",
          "[ops][sgd]") {
  // Momentum with Nesterov and weight decay (three lists), then plain SGD (two).
  const kiln::ops::SGDCoefficients momentum{0.1, 0.9, 0.1, 0.01, true, false}, plain{0.1, 0.0, 0.0, 0.0, false, false};
  kiln::test::require_prefetch_changes_no_bit(KILN_CPU_BUILDS(sgd_update), momentum, 3);
  kiln::test::require_prefetch_changes_no_bit(KILN_CPU_BUILDS(sgd_update), plain, 2);
}
