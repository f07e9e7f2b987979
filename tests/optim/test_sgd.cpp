// kiln::optim::SGD against torch::optim::SGD: the same trajectory with momentum,
// dampening, Nesterov and weight decay, in two parameter groups.
#include <torch/torch.h>

#include "optim/sgd.h"
#include "support.h"

namespace {

struct Net : torch::nn::Module {
  Net() {
    // 19,200 weights: the fused kernel's vector loop and thread split, not only its tail.
    a = register_module("a", torch::nn::Linear(64, 300));
    b = register_module("b", torch::nn::Linear(300, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return b(torch::tanh(a(x))); }
  torch::nn::Linear a{nullptr}, b{nullptr};
};

void train_step(Net& n, torch::optim::Optimizer& opt, const torch::Tensor& x, const torch::Tensor& y) {
  opt.zero_grad();
  torch::mse_loss(n.forward(x), y).backward();
  opt.step();
}

struct Config {
  double momentum, dampening, weight_decay;
  bool nesterov;
};

}  // namespace

TEST_CASE("SGD follows torch::optim::SGD within 1e-6 over 100 steps with momentum, dampening, "
          "Nesterov and weight decay",
          "[optim][sgd]") {
  const Config configs[] = {{0.0, 0.0, 0.0, false}, {0.9, 0.1, 1e-2, false}, {0.8, 0.0, 1e-3, true}};
  for (const auto& c : configs) {
    torch::manual_seed(2);
    Net ours, ref;
    {
      torch::NoGradGuard g;
      for (size_t i = 0; i < ours.parameters().size(); ++i)
        ref.parameters()[i].copy_(ours.parameters()[i]);
    }
    std::vector<torch::optim::OptimizerParamGroup> kg, tg;
    kg.emplace_back(ours.a->parameters(), std::make_unique<kiln::optim::SGDOptions>(
        kiln::optim::SGDOptions(0.05).momentum(c.momentum).dampening(c.dampening)
            .weight_decay(c.weight_decay).nesterov(c.nesterov)));
    kg.emplace_back(ours.b->parameters(), std::make_unique<kiln::optim::SGDOptions>(
        kiln::optim::SGDOptions(0.02).momentum(c.momentum).dampening(c.dampening)
            .nesterov(c.nesterov)));
    tg.emplace_back(ref.a->parameters(), std::make_unique<torch::optim::SGDOptions>(
        torch::optim::SGDOptions(0.05).momentum(c.momentum).dampening(c.dampening)
            .weight_decay(c.weight_decay).nesterov(c.nesterov)));
    tg.emplace_back(ref.b->parameters(), std::make_unique<torch::optim::SGDOptions>(
        torch::optim::SGDOptions(0.02).momentum(c.momentum).dampening(c.dampening)
            .nesterov(c.nesterov)));
    kiln::optim::SGD opt(std::move(kg));
    torch::optim::SGD ref_opt(std::move(tg), torch::optim::SGDOptions(0.05));
    for (int step = 1; step <= 100; ++step) {
      const auto x = torch::randn({16, 64});
      const auto y = torch::randn({16, 3});
      train_step(ours, opt, x, y);
      train_step(ref, ref_opt, x, y);
    }
    for (size_t i = 0; i < ours.parameters().size(); ++i) {
      INFO("momentum " << c.momentum << " nesterov " << c.nesterov << ", parameter " << i);
      KILN_REQUIRE_CLOSE(ours.parameters()[i], ref.parameters()[i], 0.0, 1e-6);
    }
  }
}

TEST_CASE("SGD rejects Nesterov without momentum and negative values", "[optim][sgd]") {
  auto w = torch::zeros({3}, torch::requires_grad());
  REQUIRE_THROWS_WITH(kiln::optim::SGD({w}, kiln::optim::SGDOptions(0.1).nesterov(true)),
                      Catch::Contains("nesterov: expected momentum > 0"));
  REQUIRE_THROWS_WITH(kiln::optim::SGD({w}, kiln::optim::SGDOptions(-0.1)),
                      Catch::Contains("lr: expected >= 0, got -0.1"));
}
