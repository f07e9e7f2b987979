// kiln::optim::Muon: its trajectory against the published update written out in
// plain ATen here, the Newton–Schulz step's singular values, the split of a
// model's parameters into Muon and AdamW groups, a small model that trains, and a
// state file whose groups do not match.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "nn/mlp.h"
#include "ops/ops.h"
#include "optim/muon.h"
#include "support.h"

namespace {

// Keller Jordan's zeropower_via_newtonschulz5 (github.com/KellerJordan/Muon, muon.py):
// X = G / (‖G‖_F + 1e-7), transposed when tall, then `steps` times
// A = X·Xᵀ, B = b·A + c·A·A, X ← a·X + B·X with (a, b, c) = (3.4445, −4.7750, 2.0315).
// The published code iterates in bfloat16, kiln in float32; this, the exact maths,
// in float64.
torch::Tensor reference_newton_schulz(const torch::Tensor& g, int64_t steps) {
  constexpr double a = 3.4445, b = -4.7750, c = 2.0315;
  const bool tall = g.size(0) > g.size(1);
  auto x = g.to(torch::kFloat64);
  if (tall) x = x.t();
  x = x / (x.norm() + 1e-7);
  for (int64_t k = 0; k < steps; ++k) {
    const auto A = torch::mm(x, x.t());
    const auto B = b * A + c * torch::mm(A, A);
    x = a * x + torch::mm(B, x);
  }
  return tall ? x.t() : x;
}

}  // namespace

TEST_CASE("Muon follows a plain ATen Muon within 1e-6 over 50 steps: tall, wide and square "
          "matrices, Nesterov or not, and its AdamW group",
          "[optim][muon]") {
  torch::manual_seed(6);
  using kiln::optim::MuonOptions;
  // Three groups: Muon with Nesterov and weight decay; Muon without either; AdamW over a
  // bias and an excluded (head) matrix. Everything in float64 on both sides but kiln's
  // Newton–Schulz, which is float32 by design: the quintic's slope a ≈ 3.4 near 0
  // amplifies its roundings to ~1e-6 of an update of lr·|O| ≈ 1e-2, a random walk
  // that reached 1.2e-7 in 50 steps (measured). Each wrong term tried (a coefficient,
  // the shape factor, Nesterov, the momentum's 1−μ, the decay's order, the step count,
  // where AdamW's eps goes, an lr change missed) failed within two steps of it.
  struct Group {
    MuonOptions options;
    std::vector<std::vector<int64_t>> shapes;
  };
  const std::vector<Group> spec = {
      {MuonOptions(0.02).momentum(0.95).nesterov(true).weight_decay(0.1),
       {{24, 6}, {6, 24}, {9, 9}}},
      {MuonOptions(0.01).momentum(0.9).nesterov(false).ns_steps(4), {{40, 3}, {3, 17}}},
      {MuonOptions(3e-3).adamw(true).beta1(0.8).beta2(0.99).eps(1e-3).weight_decay(0.05),
       {{7}, {10, 4}}}};
  std::vector<torch::optim::OptimizerParamGroup> groups;
  std::vector<std::vector<torch::Tensor>> ours(spec.size()), ref(spec.size()),
      start(spec.size()), m(spec.size()), v(spec.size());
  for (size_t g = 0; g < spec.size(); ++g) {
    for (const auto& shape : spec[g].shapes) {
      const auto p = torch::randn(shape, torch::kFloat64);
      ours[g].push_back(p.clone().requires_grad_(true));
      ref[g].push_back(p);
      start[g].push_back(p.clone());
      m[g].push_back(torch::zeros_like(p));  // Muon: the momentum; AdamW: the first moment
      v[g].push_back(torch::zeros_like(p));  // AdamW: the second moment
    }
    groups.emplace_back(ours[g], std::make_unique<MuonOptions>(spec[g].options));
  }
  kiln::optim::Muon opt(groups);

  std::vector<double> lr;
  for (const auto& group : spec) lr.push_back(group.options.lr());
  for (int step = 1; step <= 50; ++step) {
    if (step == 26) {  // as a schedule would: every group's lr halves, AdamW's too
      for (size_t g = 0; g < spec.size(); ++g) {
        lr[g] /= 2;
        opt.param_groups()[g].options().set_lr(lr[g]);
      }
    }
    for (size_t g = 0; g < spec.size(); ++g) {
      const auto& o = spec[g].options;
      for (size_t i = 0; i < ref[g].size(); ++i) {
        // Gradients of very different scales: Newton–Schulz normalises them away.
        // (eps = 1e-3 matters against √v̂ ≈ 1e-2, so where it is added is tested too.)
        const auto grad = torch::randn_like(ref[g][i]) * std::pow(10.0, step % 5 - 2);
        ours[g][i].mutable_grad() = grad.clone();
        auto& p = ref[g][i];
        if (o.adamw()) {
          // AdamW (Loshchilov & Hutter), as Muon's published adam_update and torch's AdamW:
          // m ← β1·m + (1−β1)·g; v ← β2·v + (1−β2)·g²; p ← p·(1 − lr·λ) − lr·m̂ / (√v̂ + ε)
          m[g][i] = o.beta1() * m[g][i] + (1 - o.beta1()) * grad;
          v[g][i] = o.beta2() * v[g][i] + (1 - o.beta2()) * grad * grad;
          const auto m_hat = m[g][i] / (1 - std::pow(o.beta1(), step));
          const auto v_hat = v[g][i] / (1 - std::pow(o.beta2(), step));
          p = p * (1 - lr[g] * o.weight_decay()) - lr[g] * m_hat / (v_hat.sqrt() + o.eps());
          continue;
        }
        // Muon (muon_update and Muon.step of the published muon.py):
        // buf ← μ·buf + (1−μ)·g; u = (1−μ)·g + μ·buf with Nesterov, else buf;
        // p ← p·(1 − lr·λ) − lr·√max(1, rows/cols)·NS(u)
        const double mu = o.momentum();
        m[g][i] = mu * m[g][i] + (1 - mu) * grad;
        const auto u = o.nesterov() ? (1 - mu) * grad + mu * m[g][i] : m[g][i];
        const double scale = std::sqrt(std::max(1.0, static_cast<double>(p.size(0)) / p.size(1)));
        p = p * (1 - lr[g] * o.weight_decay()) -
            lr[g] * scale * reference_newton_schulz(u, o.ns_steps());
      }
    }
    opt.step();
    for (size_t g = 0; g < spec.size(); ++g) {
      for (size_t i = 0; i < ref[g].size(); ++i) {
        INFO("step " << step << ", group " << g << ", parameter " << i << " "
                     << ref[g][i].sizes());
        KILN_REQUIRE_CLOSE(ours[g][i].detach(), ref[g][i], 0.0, 1e-6);
      }
    }
  }
  // Every parameter moved far beyond the tolerance: the comparison means something.
  for (size_t g = 0; g < spec.size(); ++g)
    for (size_t i = 0; i < ref[g].size(); ++i) {
      INFO("group " << g << ", parameter " << i);
      CHECK((ref[g][i] - start[g][i]).abs().max().item<double>() > 1e-2);
    }
}

TEST_CASE("Newton-Schulz maps a random 256x128 matrix to singular values in [0.6, 1.25]",
          "[optim][muon]") {
  torch::manual_seed(4);
  // Measured: the 5-step quintic leaves every singular value in about [0.68, 1.13]
  // (it trades exactness for speed); far from the input's spread of ~[5, 27].
  for (const auto& shape : {std::vector<int64_t>{256, 128}, std::vector<int64_t>{128, 256}}) {
    const auto g = torch::randn(shape);
    const auto o = kiln::optim::newton_schulz(g);
    REQUIRE(o.sizes() == g.sizes());
    REQUIRE(o.scalar_type() == torch::kFloat32);
    const auto sv = torch::linalg_svdvals(o.to(torch::kFloat64));
    INFO("shape " << g.sizes() << ": singular values in [" << sv.min().item<double>() << ", "
                  << sv.max().item<double>() << "]");
    CHECK(sv.min().item<double>() >= 0.6);
    CHECK(sv.max().item<double>() <= 1.25);
    // The directions are those of g's SVD: o ≈ U·Vᵀ, so U·Vᵀ·oᵀ has a positive trace near r.
    const auto usv = torch::linalg_svd(g.to(torch::kFloat64), false);
    const auto uv = torch::mm(std::get<0>(usv), std::get<2>(usv));
    const double r = static_cast<double>(std::min(shape[0], shape[1]));
    CHECK((uv * o.to(torch::kFloat64)).sum().item<double>() / r > 0.85);
  }
}

TEST_CASE("muon_param_groups sends matrices to Muon and vectors and excluded names to AdamW",
          "[optim][muon]") {
  kiln::nn::Mlp net(kiln::nn::MlpOptions(8, {16}, 3));
  // The head of an Mlp is its last layer, "layers.1".
  const auto groups = kiln::optim::muon_param_groups(net->named_parameters(), {"layers.1."});
  REQUIRE(groups.size() == 2);
  REQUIRE(groups[0].params().size() == 1);  // layers.0.weight
  REQUIRE(groups[0].params()[0].sizes() == torch::IntArrayRef({16, 8}));
  REQUIRE(groups[1].params().size() == 3);  // layers.0.bias, layers.1.weight, layers.1.bias
  REQUIRE(static_cast<const kiln::optim::MuonOptions&>(groups[1].options()).adamw());

  std::vector<torch::optim::OptimizerParamGroup> bad;
  bad.emplace_back(net->parameters());
  REQUIRE_THROWS_WITH(kiln::optim::Muon(bad), Catch::Contains("expected a 2-D matrix"));
}

TEST_CASE("Muon trains an Mlp on a separable problem: the loss falls at least 10-fold in 100 steps",
          "[optim][muon]") {
  torch::manual_seed(5);
  const auto x = torch::randn({256, 16});
  const auto target = torch::mm(x, torch::randn({16, 4})).argmax(1);  // linearly separable
  kiln::nn::Mlp net(kiln::nn::MlpOptions(16, {64}, 4));
  kiln::optim::Muon opt(kiln::optim::muon_param_groups(
      net->named_parameters(), {"layers.1."}, kiln::optim::MuonOptions(0.02),
      kiln::optim::MuonOptions(3e-3)));
  double first = 0, last = 0;
  for (int step = 0; step < 100; ++step) {
    opt.zero_grad();
    const auto loss = kiln::ops::cross_entropy(net->forward(x), target);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  INFO("loss " << first << " -> " << last);
  REQUIRE(last < first / 10);
}

TEST_CASE("Muon refuses a state whose Muon and AdamW groups are the other way round",
          "[optim][muon]") {
  auto make = [](bool first_is_adamw) {
    std::vector<torch::optim::OptimizerParamGroup> g;
    for (const bool adamw : {first_is_adamw, !first_is_adamw}) {
      auto p = torch::randn({4, 3}, torch::requires_grad());
      p.mutable_grad() = torch::randn({4, 3});
      g.emplace_back(std::vector<torch::Tensor>{p}, std::make_unique<kiln::optim::MuonOptions>(
                                                         kiln::optim::MuonOptions().adamw(adamw)));
    }
    return std::make_unique<kiln::optim::Muon>(g);
  };
  auto saved = make(false);
  saved->step();
  std::stringstream file;
  torch::save(*saved, file);
  auto other = make(true);
  REQUIRE_THROWS_WITH(torch::load(*other, file),
                      Catch::Contains("group 0: expected an AdamW group, the file has a Muon group"));
  REQUIRE(other->state().empty());
}
