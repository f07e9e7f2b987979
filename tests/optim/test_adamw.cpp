// kiln::optim::AdamW against torch::optim::AdamW: the same trajectory over 50
// steps with two parameter groups and a save/load in the middle; a state file for
// other parameters is a clear error.
#include <torch/torch.h>

#include <sstream>

#include "optim/adamw.h"
#include "support.h"

namespace {

struct Net : torch::nn::Module {
  Net() {
    a = register_module("a", torch::nn::Linear(6, 5));
    b = register_module("b", torch::nn::Linear(5, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return b(torch::tanh(a(x))); }
  torch::nn::Linear a{nullptr}, b{nullptr};
};

std::vector<torch::optim::OptimizerParamGroup> kiln_groups(Net& n) {
  std::vector<torch::optim::OptimizerParamGroup> g;
  g.emplace_back(n.a->parameters(),
                 std::make_unique<kiln::optim::AdamWOptions>(
                     kiln::optim::AdamWOptions(1e-2).weight_decay(0.1).beta1(0.8)));
  g.emplace_back(n.b->parameters(), std::make_unique<kiln::optim::AdamWOptions>(
                                        kiln::optim::AdamWOptions(3e-3).weight_decay(0.0)));
  return g;
}

std::vector<torch::optim::OptimizerParamGroup> torch_groups(Net& n) {
  std::vector<torch::optim::OptimizerParamGroup> g;
  g.emplace_back(n.a->parameters(),
                 std::make_unique<torch::optim::AdamWOptions>(
                     torch::optim::AdamWOptions(1e-2).weight_decay(0.1).betas({0.8, 0.999})));
  g.emplace_back(n.b->parameters(), std::make_unique<torch::optim::AdamWOptions>(
                                        torch::optim::AdamWOptions(3e-3).weight_decay(0.0)));
  return g;
}

void train_step(Net& n, torch::optim::Optimizer& opt, const torch::Tensor& x,
                const torch::Tensor& y) {
  opt.zero_grad();
  torch::mse_loss(n.forward(x), y).backward();
  opt.step();
}

}  // namespace

TEST_CASE("AdamW follows torch::optim::AdamW within 1e-6 over 50 steps, with a reload",
          "[optim][adamw]") {
  torch::manual_seed(1);
  Net ours, ref;
  {
    torch::NoGradGuard g;
    for (size_t i = 0; i < ours.parameters().size(); ++i)
      ref.parameters()[i].copy_(ours.parameters()[i]);
  }
  auto opt = std::make_unique<kiln::optim::AdamW>(kiln_groups(ours));
  torch::optim::AdamW ref_opt(torch_groups(ref));
  for (int step = 1; step <= 50; ++step) {
    const auto x = torch::randn({16, 6});
    const auto y = torch::randn({16, 3});
    train_step(ours, *opt, x, y);
    train_step(ref, ref_opt, x, y);
    if (step == 25) {  // save, then continue with a fresh optimizer loaded from the file
      std::stringstream file;
      torch::save(*opt, file);
      opt = std::make_unique<kiln::optim::AdamW>(kiln_groups(ours), kiln::optim::AdamWOptions(0.5));
      torch::load(*opt, file);
      REQUIRE(static_cast<kiln::optim::AdamWOptions&>(opt->param_groups()[0].options()).lr() == 1e-2);
    }
    for (size_t i = 0; i < ours.parameters().size(); ++i) {
      INFO("step " << step << ", parameter " << i);
      KILN_REQUIRE_CLOSE(ours.parameters()[i], ref.parameters()[i], 0.0, 1e-6);
    }
  }
}

TEST_CASE("AdamW refuses a state saved for other parameters", "[optim][adamw]") {
  Net n;
  kiln::optim::AdamW opt(kiln_groups(n));
  train_step(n, opt, torch::randn({4, 6}), torch::randn({4, 3}));
  std::stringstream file;
  torch::save(opt, file);

  // Another shape in group 0.
  auto other_a = torch::nn::Linear(6, 7);
  std::vector<torch::optim::OptimizerParamGroup> g;
  g.emplace_back(other_a->parameters());
  g.emplace_back(n.b->parameters());
  kiln::optim::AdamW other(std::move(g));
  REQUIRE_THROWS_WITH(torch::load(other, file),
                      Catch::Contains("group 0 parameter 0") && Catch::Contains("[7, 6]"));

  // Another number of groups.
  file.seekg(0);
  kiln::optim::AdamW one_group(n.parameters());
  REQUIRE_THROWS_WITH(torch::load(one_group, file),
                      Catch::Contains("expected 1 parameter groups, the file has 2"));
}

TEST_CASE("AdamW rejects invalid options", "[optim][adamw]") {
  Net n;
  REQUIRE_THROWS_WITH(kiln::optim::AdamW(n.parameters(), kiln::optim::AdamWOptions(-1.0)),
                      Catch::Contains("lr: expected >= 0, got -1"));
  REQUIRE_THROWS_WITH(kiln::optim::AdamW(n.parameters(), kiln::optim::AdamWOptions().beta2(1.0)),
                      Catch::Contains("beta2"));
}
