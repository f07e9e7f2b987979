// kiln::optim::Muon: the Newton–Schulz step's singular values, the split of a
// model's parameters into Muon and AdamW groups, a small model that trains, and a
// state file whose groups do not match.
#include <torch/torch.h>

#include <sstream>

#include "nn/mlp.h"
#include "ops/ops.h"
#include "optim/muon.h"
#include "support.h"

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
