// kiln::nn::checkpoint: a checkpointed model's gradients equal the plain model's with
// dropout on, the random stream after a step is the same, autocast holds in the
// recomputation, inputs without grad, several outputs, and the same on CUDA.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "nn/checkpoint.h"
#include "nn/deep_mlp.h"
#include "ops/ops.h"
#include "support.h"
#include "train/amp.h"

using kiln::nn::DeepMlp;
using kiln::nn::DeepMlpOptions;

namespace {

// A small DeepMlp with dropout; `every` 0 is the plain model.
DeepMlpOptions small_options(int64_t every, const std::string& activation = "relu") {
  return DeepMlpOptions(12, 5).layers(7).width(16).dropout(0.3).activation(activation).checkpoint_every(every);
}

// `from`'s model with checkpoint_every = every, on device, its parameters copied.
DeepMlp twin(const DeepMlp& from, int64_t every, const at::Device& device) {
  DeepMlp net(DeepMlpOptions(from->options).checkpoint_every(every));
  net->to(device);
  torch::NoGradGuard no_grad;
  const auto source = from->named_parameters();
  for (auto& p : net->named_parameters()) p.value().copy_(source[p.key()]);
  return net;
}

struct Step {
  at::Tensor output, input_grad;
  std::vector<std::pair<std::string, at::Tensor>> grads;  // by parameter name
};

// One training step from seed: forward, a weighted sum as the loss, backward.
Step train_step(DeepMlp& net, const at::Tensor& x, uint64_t seed) {
  at::manual_seed(seed);
  net->zero_grad();
  const auto input = x.detach().requires_grad_(true);
  const auto out = net->forward(input);
  const auto w = at::linspace(-1, 1, out.numel(), out.options()).view_as(out);
  (out * w).sum().backward();
  Step s{out.detach(), input.grad(), {}};
  for (const auto& p : net->named_parameters()) s.grads.emplace_back(p.key(), p.value().grad());
  return s;
}

void require_same_step(const Step& ckpt, const Step& plain) {
  KILN_REQUIRE_CLOSE(ckpt.output.cpu(), plain.output.cpu(), 0.0, 1e-6);
  REQUIRE(ckpt.input_grad.defined());
  KILN_REQUIRE_CLOSE(ckpt.input_grad.cpu(), plain.input_grad.cpu(), 0.0, 1e-6);
  REQUIRE(ckpt.grads.size() == plain.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    INFO("parameter " << plain.grads[i].first);
    REQUIRE(ckpt.grads[i].first == plain.grads[i].first);
    REQUIRE(ckpt.grads[i].second.defined());
    KILN_REQUIRE_CLOSE(ckpt.grads[i].second.cpu(), plain.grads[i].second.cpu(), 0.0, 1e-6);
  }
}

at::Tensor cpu_rng_state() { return at::detail::getDefaultCPUGenerator().get_state(); }

}  // namespace

TEST_CASE("a checkpointed DeepMlp gives the plain model's outputs and gradients with dropout on",
          "[nn][checkpoint]") {
  for (const std::string activation : {"relu", "gelu"}) {
    torch::manual_seed(0);
    DeepMlp plain(small_options(0, activation));
    const auto x = at::randn({6, 3, 4});
    // Dropout is live: another seed gives another output.
    const auto a = train_step(plain, x, 11), b = train_step(plain, x, 12);
    REQUIRE_FALSE(at::equal(a.output, b.output));
    for (const int64_t every : {1, 3, 7, 10}) {
      INFO(activation << ", checkpoint_every " << every);
      auto ckpt = twin(plain, every, at::kCPU);
      require_same_step(train_step(ckpt, x, 11), a);
    }
  }
}

TEST_CASE("the random stream after a checkpointed step is the one after a plain step",
          "[nn][checkpoint]") {
  torch::manual_seed(0);
  DeepMlp plain(small_options(0));
  auto ckpt = twin(plain, 2, at::kCPU);
  const auto x = at::randn({6, 12});
  train_step(plain, x, 5);
  const auto after_plain = cpu_rng_state();
  const auto next_plain = at::rand({8});
  train_step(ckpt, x, 5);
  REQUIRE(at::equal(cpu_rng_state(), after_plain));
  REQUIRE(at::equal(at::rand({8}), next_plain));
}

TEST_CASE("the recomputation runs under the forward's autocast state (bf16 on CPU)",
          "[nn][checkpoint]") {
  torch::manual_seed(3);
  const auto w = at::randn({8, 6}).requires_grad_(true);
  const auto b = at::randn({8}).requires_grad_(true);
  std::vector<at::Tensor> seen;  // every output fn produced, forward and recomputation
  const auto fn = [&](const at::Tensor& t) {
    auto y = kiln::ops::relu(kiln::ops::linear(t, w, b));  // bf16 under autocast
    seen.push_back(y.detach());
    return y;
  };
  const auto x0 = at::randn({5, 6});
  auto run = [&](bool checkpointed) {
    const auto x = x0.clone().requires_grad_(true);
    w.mutable_grad() = at::Tensor();
    b.mutable_grad() = at::Tensor();
    at::Tensor y;
    {
      kiln::train::AutocastGuard autocast(at::kCPU, at::kBFloat16);
      y = checkpointed ? kiln::nn::checkpoint(fn, x) : fn(x);
    }
    y.to(at::kFloat).square().sum().backward();  // backward outside the autocast region
    return std::vector<at::Tensor>{y.detach(), x.grad(), w.grad(), b.grad()};
  };
  const auto plain = run(false);
  seen.clear();
  const auto ckpt = run(true);
  REQUIRE(plain[0].scalar_type() == at::kBFloat16);
  REQUIRE(seen.size() == 2);
  REQUIRE(seen[1].scalar_type() == at::kBFloat16);
  KILN_REQUIRE_CLOSE(seen[1], seen[0], 0.0, 0.0);
  for (size_t i = 0; i < plain.size(); ++i) {
    INFO("result " << i << " (output, x, w, b)");
    REQUIRE(ckpt[i].defined());
    REQUIRE(ckpt[i].scalar_type() == plain[i].scalar_type());
    KILN_REQUIRE_CLOSE(ckpt[i], plain[i], 0.0, 0.0);
  }
  REQUIRE_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
}

TEST_CASE("an input that needs no gradient gets none; the others get theirs",
          "[nn][checkpoint]") {
  torch::manual_seed(4);
  const auto w = at::randn({4}).requires_grad_(true);
  const kiln::nn::CheckpointFn fn = [&](const std::vector<at::Tensor>& xs) {
    return std::vector<at::Tensor>{(xs[0] * xs[1] * w).tanh()};
  };
  const auto x = at::randn({3, 4}).requires_grad_(true);
  const auto mask = at::rand({3, 4});
  const auto plain_out = fn({x, mask})[0];
  plain_out.sum().backward();
  const auto x_grad = x.grad().clone(), w_grad = w.grad().clone();
  x.mutable_grad() = at::Tensor();
  w.mutable_grad() = at::Tensor();

  const auto out = kiln::nn::checkpoint(fn, {x, mask})[0];
  REQUIRE(out.requires_grad());
  out.sum().backward();
  KILN_REQUIRE_CLOSE(x.grad(), x_grad, 0.0, 0.0);
  KILN_REQUIRE_CLOSE(w.grad(), w_grad, 0.0, 0.0);
  REQUIRE_FALSE(mask.grad().defined());
}

TEST_CASE("with no input needing a gradient, fn runs plainly and its parameters still learn",
          "[nn][checkpoint]") {
  const auto w = at::randn({4}).requires_grad_(true);
  const auto x = at::randn({3, 4});
  const auto y = kiln::nn::checkpoint([&](const at::Tensor& t) { return t * w; }, x);
  y.sum().backward();
  REQUIRE(w.grad().defined());
  KILN_REQUIRE_CLOSE(w.grad(), x.sum(0), 0.0, 1e-6);
}

TEST_CASE("several outputs, one unused, give the plain gradients", "[nn][checkpoint]") {
  torch::manual_seed(5);
  const auto x = at::randn({5}).requires_grad_(true);
  const kiln::nn::CheckpointFn fn = [](const std::vector<at::Tensor>& xs) {
    return std::vector<at::Tensor>{xs[0].sin(), xs[0].exp(), xs[0]};
  };
  const auto outs = kiln::nn::checkpoint(fn, {x});
  REQUIRE(outs.size() == 3);
  (outs[0] * 2 + outs[2]).sum().backward();  // outs[1] unused
  KILN_REQUIRE_CLOSE(x.grad(), x.detach().cos() * 2 + 1, 0.0, 1e-6);
}

TEST_CASE("checkpoint rejects an empty function and an undefined input", "[nn][checkpoint]") {
  const auto x = at::randn({2}).requires_grad_(true);
  REQUIRE_THROWS_WITH(kiln::nn::checkpoint(kiln::nn::CheckpointFn(), {x}),
                      Catch::Contains("fn: expected a function"));
  REQUIRE_THROWS_WITH(kiln::nn::checkpoint([](const std::vector<at::Tensor>& xs) { return xs; },
                                           {x, at::Tensor()}),
                      Catch::Contains("inputs[1]: expected a defined tensor"));
}

TEST_CASE("on CUDA a checkpointed DeepMlp gives the plain gradients and the same random stream",
          "[nn][checkpoint][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  const at::Device cuda(at::kCUDA, 0);
  torch::manual_seed(0);
  auto plain = twin(DeepMlp(small_options(0)), 0, cuda);
  auto ckpt = twin(plain, 3, cuda);
  const auto x = at::randn({6, 12}, cuda);
  auto& gen = at::globalContext().defaultGenerator(cuda);
  const auto a = train_step(plain, x, 21);
  const auto after_plain = gen.get_state();
  REQUIRE_FALSE(at::equal(a.output, train_step(plain, x, 22).output));  // dropout is live
  require_same_step(train_step(ckpt, x, 21), a);
  REQUIRE(at::equal(gen.get_state(), after_plain));
}
