// kiln::optim::Lion against the update written out in plain ATen here, with two
// parameter groups of different learning rates and weight decays.
#include <torch/torch.h>

#include "optim/lion.h"
#include "support.h"

TEST_CASE("Lion follows a plain ATen Lion within 1e-6 over 30 steps in two groups",
          "[optim][lion]") {
  torch::manual_seed(3);
  const double lrs[] = {1e-2, 3e-3}, wds[] = {0.1, 0.0}, b1 = 0.9, b2 = 0.99;
  std::vector<torch::Tensor> ours = {torch::randn({7, 5}), torch::randn({33})};
  std::vector<torch::Tensor> ref = {ours[0].clone(), ours[1].clone()};
  std::vector<torch::Tensor> m = {torch::zeros({7, 5}), torch::zeros({33})};
  for (auto& p : ours) p.requires_grad_(true);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (int g = 0; g < 2; ++g)
    groups.emplace_back(std::vector<torch::Tensor>{ours[g]},
                        std::make_unique<kiln::optim::LionOptions>(
                            kiln::optim::LionOptions(lrs[g]).beta1(b1).beta2(b2).weight_decay(wds[g])));
  kiln::optim::Lion opt(std::move(groups));
  for (int step = 0; step < 30; ++step) {
    for (int g = 0; g < 2; ++g) {
      const auto grad = torch::randn_like(ref[g]);
      ours[g].mutable_grad() = grad.clone();
      // The reference: c = β1·m + (1−β1)·g; p ← p·(1 − lr·λ) − lr·sign(c); m ← β2·m + (1−β2)·g
      const auto c = b1 * m[g] + (1 - b1) * grad;
      ref[g] = ref[g] * (1 - lrs[g] * wds[g]) - lrs[g] * torch::sign(c);
      m[g] = b2 * m[g] + (1 - b2) * grad;
    }
    opt.step();
    for (int g = 0; g < 2; ++g) {
      INFO("step " << step << ", group " << g);
      KILN_REQUIRE_CLOSE(ours[g].detach(), ref[g], 0.0, 1e-6);
    }
  }
}

TEST_CASE("Lion rejects invalid options", "[optim][lion]") {
  auto w = torch::zeros({3}, torch::requires_grad());
  REQUIRE_THROWS_WITH(kiln::optim::Lion({w}, kiln::optim::LionOptions().beta2(1.0)),
                      Catch::Contains("beta2: expected in [0, 1), got 1"));
}
