// kiln::nn::DynamicMlp: the depth of each call (fixed, drawn per step from the seed,
// full in evaluation, forced), residual adds, gradients that reach exactly the layers
// a step ran and optimizers that leave the others (and their state) untouched,
// checkpointing that changes nothing, and whole runs from config: per-depth results
// in metrics.jsonl, micro-batches of one step at one depth, resume bit for bit.
#include <torch/torch.h>

#include <set>

#include "nn/dynamic_mlp.h"
#include "nn/factory.h"
#include "optim/adamw.h"
#include "optim/factory.h"
#include "run_files.h"
#include "support.h"
#include "train/checkpoint.h"

using kiln::nn::DynamicMlp;
using kiln::nn::DynamicMlpOptions;

namespace {

DynamicMlpOptions small(int64_t max_depth = 4) {
  return DynamicMlpOptions(6, 3).max_depth(max_depth).min_depth(1).width(8).depth_sampling("uniform");
}

// The hidden layer a parameter name belongs to ("layers.2.bias" → 2), −1 for input/output.
int64_t layer_of(const std::string& name) {
  if (name.rfind("layers.", 0) != 0) return -1;
  return std::stoll(name.substr(7, name.find('.', 7) - 7));
}

// A weighted sum of the outputs as the loss, so every logit gets its own gradient.
at::Tensor loss_of(const at::Tensor& out) {
  return (out * at::linspace(-1, 1, out.numel(), out.options()).view_as(out)).sum();
}

// The tiny config (Fashion-MNIST) with `overrides`, or a resume of `resume`.
int train(const std::string& run_dir, std::vector<std::string> overrides, const std::string& resume = "") {
  return kiln::test::train("configs/tiny.toml", run_dir, std::move(overrides), resume);
}

}  // namespace

TEST_CASE("DynamicMlp: parameter names, shapes, and the depth each call runs", "[nn][dynamic_mlp]") {
  torch::manual_seed(0);
  DynamicMlp net(small());
  std::vector<std::string> names;
  for (const auto& p : net->named_parameters()) names.push_back(p.key());
  REQUIRE(names == std::vector<std::string>{"input.weight", "input.bias", "layers.0.weight", "layers.0.bias",
                                            "layers.1.weight", "layers.1.bias", "layers.2.weight",
                                            "layers.2.bias", "layers.3.weight", "layers.3.bias",
                                            "output.weight", "output.bias"});
  REQUIRE(net->head_parameters() == std::vector<std::string>{"output.weight", "output.bias"});
  const auto x = at::randn({5, 2, 3});
  REQUIRE(net->forward(x).sizes() == at::IntArrayRef{5, 3});
  // No step drawn yet: the full depth; in training a drawn depth holds until the next step.
  REQUIRE(net->depth() == 4);
  std::set<int64_t> seen;
  for (int64_t step = 0; step < 200; ++step) {
    net->begin_step(7, step);
    const int64_t d = net->depth();
    REQUIRE(d >= 1);
    REQUIRE(d <= 4);
    seen.insert(d);
    REQUIRE(net->depth() == d);  // every micro-batch of the step
    DynamicMlp again(small());
    again->begin_step(7, step);
    REQUIRE(again->depth() == d);  // a pure function of (seed, step): what a resumed run draws
  }
  REQUIRE(seen == std::set<int64_t>{1, 2, 3, 4});
  std::vector<int64_t> a, b;
  for (int64_t step = 0; step < 20; ++step) {
    net->begin_step(7, step), a.push_back(net->depth());
    net->begin_step(8, step), b.push_back(net->depth());
  }
  REQUIRE(a != b);  // another seed, another sequence
  net->begin_step(7, 3);
  const int64_t drawn = net->depth();
  REQUIRE(at::equal(net->forward(x), net->forward_at(x, drawn)));
  net->eval();
  REQUIRE(net->depth() == 4);  // evaluation runs the full depth
  net->force_depth(2);
  REQUIRE(net->depth() == 2);
  REQUIRE(at::equal(net->forward(x), net->forward_at(x, 2)));
  net->force_depth(std::nullopt);
  REQUIRE(net->depth() == 4);
  // "fixed" draws nothing: every step runs the full depth.
  DynamicMlp fixed(DynamicMlpOptions(small()).depth_sampling("fixed"));
  fixed->begin_step(7, 3);
  REQUIRE(fixed->depth() == 4);
}

TEST_CASE("DynamicMlp adds each block's input where the shapes match", "[nn][dynamic_mlp]") {
  torch::manual_seed(1);
  for (const bool residual : {true, false}) {
    INFO("residual " << residual);
    DynamicMlp net(DynamicMlpOptions(small()).residual(residual));
    {
      torch::NoGradGuard no_grad;  // layer 0 computes relu(0) = 0
      net->named_parameters()["layers.0.weight"].zero_();
      net->named_parameters()["layers.0.bias"].zero_();
    }
    const auto x = at::randn({4, 6});
    // With the residual add the zero layer passes its input on; without, it gives zeros.
    const bool same = at::equal(net->forward_at(x, 1), net->forward_at(x, 0));
    REQUIRE(same == residual);
  }
  // The input layer (6 → 8) has no residual; one of width == in has.
  DynamicMlp square(DynamicMlpOptions(8, 3).max_depth(1).width(8));
  {
    torch::NoGradGuard no_grad;
    square->named_parameters()["input.weight"].zero_();
    square->named_parameters()["input.bias"].zero_();
    square->named_parameters()["output.bias"].zero_();
  }
  const auto x = at::randn({4, 8});
  const auto w = square->named_parameters()["output.weight"];
  KILN_REQUIRE_CLOSE(square->forward_at(x, 0), at::matmul(x, w.t()), 1e-5, 1e-6);
}

TEST_CASE("a step's gradients reach exactly the layers it ran", "[nn][dynamic_mlp]") {
  torch::manual_seed(2);
  DynamicMlp net(small(5));
  const auto x = at::randn({7, 6});
  for (const int64_t depth : {0, 1, 3, 5}) {
    INFO("depth " << depth);
    net->zero_grad();  // set to none
    loss_of(net->forward_at(x, depth)).backward();
    for (const auto& p : net->named_parameters()) {
      INFO(p.key());
      const int64_t layer = layer_of(p.key());
      const bool used = layer < depth;  // input and output (−1) always
      REQUIRE(p.value().grad().defined() == used);
      if (used) REQUIRE(p.value().grad().abs().sum().item<double>() > 0);
    }
  }
}

TEST_CASE("optimizers leave a layer a step did not run, and its state, as they were",
          "[nn][dynamic_mlp][optim]") {
  for (const std::string name : {"adamw", "lion", "sgd", "muon"}) {
    INFO(name);
    torch::manual_seed(3);
    DynamicMlp net(small(4));
    kiln::optim::OptimizerSpec spec;
    spec.name = name;
    spec.lr = 0.05;
    spec.weight_decay = 0.1;  // decoupled (adamw, lion, muon) or L2 (sgd): neither may touch an idle layer
    if (name == "sgd") spec.momentum = 0.9;
    auto opt = kiln::optim::make_optimizer(spec, net->named_parameters());
    const auto x = at::randn({8, 6});
    // Step 1 at the full depth gives every layer momentum/moment state; step 2 runs
    // one layer, so layers 1..3 have state that would move them if they were stepped.
    for (const int64_t depth : {4, 1}) {
      opt->zero_grad();
      loss_of(net->forward_at(x, depth)).backward();
      std::map<std::string, at::Tensor> before;
      for (const auto& p : net->named_parameters()) before[p.key()] = p.value().clone();
      opt->step();
      for (const auto& p : net->named_parameters()) {
        INFO("depth " << depth << ", " << p.key());
        const bool used = layer_of(p.key()) < depth;
        REQUIRE(at::equal(p.value(), before[p.key()]) == !used);
      }
    }
    if (name == "adamw") {  // an idle layer's step count (bias correction) does not advance
      const auto params = net->named_parameters();
      const auto step_of = [&](const std::string& key) {
        const auto& state = opt->state().at(params[key].unsafeGetTensorImpl());
        return static_cast<const kiln::optim::AdamWParamState&>(*state).step();
      };
      REQUIRE(step_of("layers.0.weight") == 2);
      REQUIRE(step_of("layers.1.weight") == 1);
      REQUIRE(step_of("layers.3.bias") == 1);
    }
  }
}

TEST_CASE("a checkpointed DynamicMlp gives the plain model's outputs and gradients", "[nn][dynamic_mlp][checkpoint]") {
  torch::manual_seed(4);
  DynamicMlp plain(DynamicMlpOptions(small(5)).dropout(0.3).activation("gelu"));
  const auto x = at::randn({6, 6});
  const auto run = [&](DynamicMlp& net, int64_t depth) {
    at::manual_seed(11);  // the same dropout masks
    net->zero_grad();
    const auto input = x.clone().requires_grad_(true);
    const auto out = net->forward_at(input, depth);
    loss_of(out).backward();
    std::vector<at::Tensor> grads{out.detach(), input.grad()};
    for (const auto& p : net->named_parameters()) grads.push_back(p.value().grad());
    return grads;
  };
  for (const int64_t every : {1, 2, 4}) {
    DynamicMlp ckpt(DynamicMlpOptions(plain->options).checkpoint_every(every));
    {
      torch::NoGradGuard no_grad;
      for (auto& p : ckpt->named_parameters()) p.value().copy_(plain->named_parameters()[p.key()]);
    }
    for (const int64_t depth : {3, 5}) {
      INFO("checkpoint_every " << every << ", depth " << depth);
      const auto a = run(ckpt, depth), b = run(plain, depth);
      for (size_t i = 0; i < a.size(); ++i) {
        INFO("tensor " << i);
        REQUIRE(a[i].defined() == b[i].defined());  // idle layers: none in both
        if (b[i].defined()) KILN_REQUIRE_CLOSE(a[i], b[i], 0.0, 1e-6);
      }
    }
  }
}

TEST_CASE("DynamicMlp rejects bad options, naming the option", "[nn][dynamic_mlp]") {
  CHECK_THROWS_WITH(DynamicMlp(small().min_depth(5)), Catch::Contains("DynamicMlp: min_depth: expected 0..max_depth (4), got 5"));
  CHECK_THROWS_WITH(DynamicMlp(small().max_depth(0).min_depth(0)), Catch::Contains("max_depth: expected ≥ 1, got 0"));
  CHECK_THROWS_WITH(DynamicMlp(small().depth_sampling("random")),
                    Catch::Contains("depth_sampling: expected one of fixed, uniform, got \"random\""));
  CHECK_THROWS_WITH(DynamicMlp(small().activation("tanh")), Catch::Contains("DynamicMlp: activation"));
  DynamicMlp net(small());
  CHECK_THROWS_WITH(net->forward_at(at::randn({2, 6}), 5), Catch::Contains("depth: expected 0..4, got 5"));
  CHECK_THROWS_WITH(net->force_depth(-1), Catch::Contains("force_depth: expected 0..4, got -1"));
}

TEST_CASE("dynamic_mlp trains from config with uniform depths, reports each depth, resumes bit for bit",
          "[train][dynamic_mlp]") {
  kiln::test::TempDir dir;
  const std::vector<std::string> common = {
      "model.name=dynamic_mlp", "model.depth=3",    "model.min_depth=1",     "model.width=32",
      "model.depth_sampling=uniform", "model.checkpoint_every=2", "model.dropout=0.1",
      "data.train_limit=640", "data.test_limit=200", "train.epochs=2", "train.threads=1",
      "optim.weight_decay=0.05"};
  REQUIRE(train(dir / "straight", common) == 0);
  auto stopped = common;
  stopped.push_back("train.max_steps=13");  // mid-epoch: 10 batches an epoch
  REQUIRE(train(dir / "resumed", stopped) == 0);
  REQUIRE(train("", {"train.max_steps=0"}, dir / "resumed") == 0);
  REQUIRE(kiln::test::final_weights_differ(dir / "straight", dir / "resumed") == "");
  const auto last = kiln::test::last_test_line(dir / "straight");
  INFO(last.dump());
  REQUIRE(last["accuracy"].get<double>() > 0.5);
  const auto& per = last["per_depth"];
  REQUIRE(per.size() == 3);
  for (const char* d : {"1", "2", "3"}) {
    REQUIRE(per[d]["accuracy"].get<double>() > 0.3);
    REQUIRE(per[d]["loss"].is_number());
  }
  // The full depth is what the evaluation itself runs.
  REQUIRE(per["3"]["accuracy"] == last["accuracy"]);
  REQUIRE(per["3"]["loss"] == last["loss"]);
}

TEST_CASE("the micro-batches of one step run at the step's depth", "[train][dynamic_mlp][accumulate]") {
  kiln::test::TempDir dir;
  const std::vector<std::string> common = {
      "model.name=dynamic_mlp", "model.depth=4", "model.min_depth=1", "model.width=32",
      "model.depth_sampling=uniform", "data.train_limit=640", "data.test_limit=100",
      "train.max_steps=8", "train.threads=1"};
  REQUIRE(train(dir / "whole", common) == 0);
  auto parts = common;
  parts.push_back("train.accumulate=4");  // 4 micro-batches of 16
  REQUIRE(train(dir / "parts", parts) == 0);
  const auto a = kiln::test::checkpoint_weights(*kiln::train::latest_checkpoint(dir / "whole"));
  const auto b = kiln::test::checkpoint_weights(*kiln::train::latest_checkpoint(dir / "parts"));
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    const auto c = kiln::test::all_close(b[i].second, a[i].second, 1e-4, 1e-6);
    INFO(c.report);
    REQUIRE(c.ok);
  }
}
