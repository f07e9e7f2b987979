// kiln::optim::Lion against the update written out in plain ATen here, with two
// parameter groups of different learning rates and weight decays.
#include <torch/torch.h>

#include "optim/lion.h"
#include "support.h"

TEST_CASE("Lion follows a plain ATen Lion within 1e-6 over 100 steps in two groups",
          "[optim][lion]") {
  // The reference is Lion as kiln ran it before the fused kernel, in ATen's op order
  // (m·β1, then + (1−β1)·g): where the interpolated momentum is within a rounding of 0
  // another order could flip a sign. 70001 elements: vectorised, split over threads.
  torch::manual_seed(3);
  const double lrs[] = {1e-2, 3e-3}, wds[] = {0.1, 0.0}, b1 = 0.9, b2 = 0.99;
  std::vector<torch::Tensor> ours = {torch::randn({7, 5}), torch::randn({70001})};
  std::vector<torch::Tensor> ref = {ours[0].clone(), ours[1].clone()};
  std::vector<torch::Tensor> m = {torch::zeros({7, 5}), torch::zeros({70001})};
  for (auto& p : ours) p.requires_grad_(true);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (int g = 0; g < 2; ++g)
    groups.emplace_back(std::vector<torch::Tensor>{ours[g]},
                        std::make_unique<kiln::optim::LionOptions>(
                            kiln::optim::LionOptions(lrs[g]).beta1(b1).beta2(b2).weight_decay(wds[g])));
  kiln::optim::Lion opt(std::move(groups));
  for (int step = 0; step < 100; ++step) {
    for (int g = 0; g < 2; ++g) {
      const auto grad = torch::randn_like(ref[g]);
      ours[g].mutable_grad() = grad.clone();
      // c = β1·m + (1−β1)·g; p ← p·(1 − lr·λ) − lr·sign(c); m ← β2·m + (1−β2)·g
      const auto update = m[g].mul(b1).add_(grad, 1 - b1).sign_();
      if (wds[g] != 0) ref[g].mul_(1 - lrs[g] * wds[g]);
      ref[g].add_(update, -lrs[g]);
      m[g].mul_(b2).add_(grad, 1 - b2);
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
