// kiln::optim::AdamW (the fused update) against torch::optim::AdamW: the same
// trajectory over 100 steps with two parameter groups and a save/load in the
// middle, in float32 and float64, and with parameters whose steps differ; a state
// file for other parameters is a clear error.
#include <torch/torch.h>

#include <sstream>

#include "optim/adamw.h"
#include "support.h"

namespace {

struct Net : torch::nn::Module {
  Net() {
    a = register_module("a", torch::nn::Linear(6, 5));
    b = register_module("b", torch::nn::Linear(5, 3));
    c = register_module("c", torch::nn::Linear(6, 3));
  }
  // c joins the model only when asked, so its parameters get gradients (and
  // AdamW steps) later than the others.
  torch::Tensor forward(const torch::Tensor& x, bool with_c = false) {
    auto y = b(torch::tanh(a(x)));
    return with_c ? y + c(x) : y;
  }
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr};
};

void copy_parameters(Net& from, Net& to) {
  torch::NoGradGuard g;
  for (size_t i = 0; i < from.parameters().size(); ++i) to.parameters()[i].copy_(from.parameters()[i]);
}

std::vector<torch::Tensor> head_parameters(Net& n) {
  auto p = n.b->parameters();
  for (const auto& t : n.c->parameters()) p.push_back(t);
  return p;
}

std::vector<torch::optim::OptimizerParamGroup> kiln_groups(Net& n) {
  std::vector<torch::optim::OptimizerParamGroup> g;
  g.emplace_back(n.a->parameters(),
                 std::make_unique<kiln::optim::AdamWOptions>(
                     kiln::optim::AdamWOptions(1e-2).weight_decay(0.1).beta1(0.8)));
  g.emplace_back(head_parameters(n), std::make_unique<kiln::optim::AdamWOptions>(
                                         kiln::optim::AdamWOptions(3e-3).weight_decay(0.0)));
  return g;
}

std::vector<torch::optim::OptimizerParamGroup> torch_groups(Net& n) {
  std::vector<torch::optim::OptimizerParamGroup> g;
  g.emplace_back(n.a->parameters(),
                 std::make_unique<torch::optim::AdamWOptions>(
                     torch::optim::AdamWOptions(1e-2).weight_decay(0.1).betas({0.8, 0.999})));
  g.emplace_back(head_parameters(n), std::make_unique<torch::optim::AdamWOptions>(
                                         torch::optim::AdamWOptions(3e-3).weight_decay(0.0)));
  return g;
}

void train_step(Net& n, torch::optim::Optimizer& opt, const torch::Tensor& x,
                const torch::Tensor& y, bool with_c = false) {
  opt.zero_grad();
  torch::mse_loss(n.forward(x, with_c), y).backward();
  opt.step();
}

// Trains a copy of `ours` with kiln's AdamW and with torch's side by side for
// `steps` steps, c joining at `c_from`, and requires every parameter to agree
// within `atol` after every step; with reload_at > 0 kiln's optimizer is saved
// and continued as a fresh one loaded from the file.
void require_same_trajectory(Net& ours, int steps, int c_from, double atol, int reload_at = 0) {
  const auto dtype = ours.parameters()[0].scalar_type();
  Net ref;
  ref.to(dtype);
  copy_parameters(ours, ref);
  auto opt = std::make_unique<kiln::optim::AdamW>(kiln_groups(ours));
  torch::optim::AdamW ref_opt(torch_groups(ref));
  for (int step = 1; step <= steps; ++step) {
    const auto x = torch::randn({16, 6}, dtype);
    const auto y = torch::randn({16, 3}, dtype);
    train_step(ours, *opt, x, y, step >= c_from);
    train_step(ref, ref_opt, x, y, step >= c_from);
    if (step == reload_at) {
      std::stringstream file;
      torch::save(*opt, file);
      opt = std::make_unique<kiln::optim::AdamW>(kiln_groups(ours), kiln::optim::AdamWOptions(0.5));
      torch::load(*opt, file);
      REQUIRE(static_cast<kiln::optim::AdamWOptions&>(opt->param_groups()[0].options()).lr() == 1e-2);
    }
    for (size_t i = 0; i < ours.parameters().size(); ++i) {
      INFO("step " << step << ", parameter " << i);
      KILN_REQUIRE_CLOSE(ours.parameters()[i], ref.parameters()[i], 0.0, atol);
    }
  }
}

}  // namespace

TEST_CASE("AdamW follows torch::optim::AdamW within 1e-6 over 100 steps in float32, with a reload",
          "[optim][adamw]") {
  torch::manual_seed(1);
  Net ours;
  require_same_trajectory(ours, 100, /*c_from=*/1, 1e-6, /*reload_at=*/50);
}

TEST_CASE("AdamW follows torch::optim::AdamW within 1e-12 over 100 steps in float64",
          "[optim][adamw]") {
  torch::manual_seed(5);
  Net ours;
  ours.to(torch::kDouble);
  require_same_trajectory(ours, 100, /*c_from=*/1, 1e-12);
}

TEST_CASE("AdamW follows torch::optim::AdamW when parameters get their first gradient at different steps",
          "[optim][adamw]") {
  // c's parameters start at step 1 when the others are at step 21: two buckets
  // of different bias corrections in one group, and again after a reload.
  torch::manual_seed(6);
  Net ours;
  require_same_trajectory(ours, 40, /*c_from=*/21, 1e-6, /*reload_at=*/30);
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
  g.emplace_back(head_parameters(n));
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
