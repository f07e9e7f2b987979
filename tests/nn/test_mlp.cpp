// kiln::nn::Mlp's taped step (forward_taped, backward_taped: the trainer's step
// without autograd's graph) against the same step through autograd, bit for bit:
// logits, loss and every parameter's gradient, over shapes that take each product
// path (few rows transposed, many rows, a linear model), relu, gelu and sigmoid,
// dropout, bf16 and fp16 autocast, micro-batches whose gradients add up, and frozen
// layers; and what it refuses.
#include <ATen/ATen.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "nn/mlp.h"
#include "ops/ops.h"
#include "support.h"
#include "train/amp.h"

using kiln::nn::Mlp;
using kiln::nn::MlpOptions;
using kiln::nn::MlpTape;

namespace {

struct Case {
  int64_t in;
  std::vector<int64_t> hidden;
  int64_t out, rows;
  std::string activation = "relu";
  double dropout = 0.0;
  std::optional<at::ScalarType> autocast = std::nullopt;  // the trainer's bf16 or fp16
};

MlpOptions options_of(const Case& c) {
  kiln::nn::ActivationOptions act(c.activation);
  if (c.activation == "sigmoid") act.sigmoid_beta(1.5).sigmoid_grad_clip(0.2);
  return MlpOptions(c.in, c.hidden, c.out).activation(act).dropout(c.dropout);
}

// Two nets with the same parameters (the same seed).
std::pair<Mlp, Mlp> twins(const Case& c, uint64_t seed) {
  torch::manual_seed(seed);
  Mlp a(options_of(c));
  torch::manual_seed(seed);
  Mlp b(options_of(c));
  return {a, b};
}

// The trainer's autograd step for one micro-batch: forward and loss under autocast
// where the case has it, loss · weight backward from a 1.
at::Tensor autograd_part(Mlp& net, const at::Tensor& x, const at::Tensor& y, double weight, at::Tensor& logits,
                         std::optional<at::ScalarType> autocast) {
  at::Tensor loss;
  {
    kiln::train::AutocastGuard amp(x.device().type(), autocast.value_or(at::kBFloat16), autocast.has_value());
    logits = net->forward(x);
    loss = kiln::ops::cross_entropy(logits, y);  // float32 logits under autocast
  }
  (weight == 1.0 ? loss : loss * weight).backward(at::ones({}));
  return loss.detach();
}

// The trainer's taped step for one micro-batch: the loss's cast of the logits to
// float32 under autocast, and its gradient's back (train::taped_loss's).
// `tape` carries the casts from one micro-batch to the next as the trainer's does: the
// first casts (reuse false), each but the last keeps them.
at::Tensor taped_part(Mlp& net, const at::Tensor& x, const at::Tensor& y, double weight, at::Tensor& logits,
                      std::optional<at::ScalarType> autocast, MlpTape& tape, bool first = true, bool last = true) {
  logits = net->forward_taped(x, tape, autocast, /*reuse_casts=*/!first);
  if (autocast) REQUIRE(tape.casts.size() == 2 * net->options.hidden().size() + 2);
  REQUIRE(logits.scalar_type() == autocast.value_or(at::kFloat));
  at::AutoDispatchBelowADInplaceOrView below;
  const auto input = kiln::ops::autocast_cast(logits, at::kFloat);
  auto [loss, lse] = kiln::ops::cross_entropy_forward(input, y);
  const auto one = at::ones({});
  const auto g = kiln::ops::cross_entropy_backward(weight == 1.0 ? one : one * weight, input, y, lse);
  net->backward_taped(kiln::ops::autocast_cast_backward(g, logits.scalar_type()), tape, /*keep_casts=*/!last);
  REQUIRE(tape.inputs.empty());  // released
  REQUIRE(tape.casts.empty() == (last || !autocast));
  return loss;
}

// Where the two nets' gradients differ ("" when none does): defined alike, equal bit for bit.
std::string grads_differ(Mlp& a, Mlp& b) {
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  for (const auto& item : pa) {
    const auto& ga = item.value().grad();
    const auto& gb = pb[item.key()].grad();
    if (ga.defined() != gb.defined()) return item.key() + ": defined in one only";
    if (ga.defined() && !at::equal(ga, gb)) return item.key();
  }
  return "";
}

// Each case's taped step against autograd's on `device`, in one micro-batch and in two.
void require_taped_matches_autograd(const std::vector<Case>& cases, const at::Device& device) {
  for (const auto& c : cases) {
    INFO("in " << c.in << ", " << c.hidden.size() << " hidden layers, out " << c.out << ", rows " << c.rows
                << ", " << c.activation << ", dropout " << c.dropout << ", autocast "
                << (c.autocast ? c10::toString(*c.autocast) : "none") << ", " << device);
    for (const int micro_batches : {1, 2}) {
      INFO(micro_batches << " micro-batch(es)");
      auto [a, b] = twins(c, 7);
      a->to(device);
      b->to(device);
      const auto x = torch::randn({c.rows, c.in}).to(device);
      const auto y = torch::randint(0, c.out, {c.rows}, torch::kLong).to(device);
      const int64_t micro = (c.rows + micro_batches - 1) / micro_batches;
      const auto xs = x.split(micro), ys = y.split(micro);
      MlpTape tape;
      for (size_t i = 0; i < xs.size(); ++i) {
        torch::manual_seed(100 + i);  // dropout's seeds: each side draws its own, alike
        const double weight = static_cast<double>(xs[i].size(0)) / static_cast<double>(c.rows);
        at::Tensor la, lb;
        const auto loss_a = autograd_part(a, xs[i], ys[i], weight, la, c.autocast);
        torch::manual_seed(100 + i);
        const auto loss_b = taped_part(b, xs[i], ys[i], weight, lb, c.autocast, tape, i == 0, i + 1 == xs.size());
        REQUIRE_FALSE(lb.requires_grad());
        REQUIRE(at::equal(la.detach(), lb));
        REQUIRE(at::equal(loss_a, loss_b));
      }
      REQUIRE(grads_differ(a, b) == "");
      for (const auto& p : b->parameters()) {
        REQUIRE(p.grad().defined());
        REQUIRE(p.grad().scalar_type() == at::kFloat);  // cast back under autocast
      }
    }
  }
}

}  // namespace

TEST_CASE("Mlp: the taped step gives autograd's logits, loss and gradients bit for bit", "[nn][mlp]") {
  require_taped_matches_autograd(
      {
          {784, {512, 256}, 10, 32},  // the default model at batch 32 (few rows: transposed on MKL)
          {784, {512, 256}, 10, 128},
          {13, {}, 3, 7},  // a linear model: the head alone
          {20, {16, 9}, 5, 5},
          {20, {16, 9, 4}, 5, 64},
          {784, {512, 256}, 10, 32, "gelu"},  // gelu: bias_gelu_backward's one pass where it has a kernel
          {20, {16, 9}, 5, 24, "gelu"},
          {20, {16, 9}, 5, 24, "relu", 0.25},  // dropout: the same seeds drawn in the same order
          {20, {16, 9}, 5, 24, "gelu", 0.5},
          {20, {16, 9}, 5, 24, "sigmoid"},  // linear then sigmoid (beta 1.5, its gradient clipped)
          {20, {16, 9}, 5, 24, "sigmoid", 0.25},
          // autocast: each product on the casts autocast makes, gradients cast back
          {784, {512, 256}, 10, 32, "relu", 0.0, at::kBFloat16},
          {784, {512, 256}, 10, 128, "relu", 0.0, at::kBFloat16},
          {20, {16, 9}, 5, 24, "gelu", 0.5, at::kBFloat16},
          {20, {16, 9}, 5, 24, "sigmoid", 0.0, at::kBFloat16},
          {13, {}, 3, 7, "relu", 0.0, at::kBFloat16},
          {20, {16, 9}, 5, 24, "relu", 0.25, at::kHalf},
          {20, {16, 9}, 5, 24, "gelu", 0.0, at::kHalf},
      },
      at::kCPU);
}

// NOT YET RUN ON A GPU: the same on CUDA (autocast's casts through at::to there, the
// products on cuBLAS(Lt), gelu in its epilogue).
TEST_CASE("Mlp: on CUDA the taped step gives autograd's logits, loss and gradients bit for bit",
          "[nn][mlp][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  require_taped_matches_autograd(
      {
          {784, {512, 256}, 10, 128},
          {20, {16, 9}, 5, 24, "gelu", 0.5},
          {20, {16, 9}, 5, 24, "sigmoid", 0.25},
          {784, {512, 256}, 10, 128, "relu", 0.0, at::kBFloat16},
          {20, {16, 9}, 5, 24, "gelu", 0.0, at::kHalf},
      },
      at::Device(at::kCUDA, 0));
}

TEST_CASE("Mlp: the taped step leaves frozen parameters without gradients, as autograd does", "[nn][mlp]") {
  for (const Case& c : {Case{20, {16, 9}, 5, 12}, Case{20, {16, 9}, 5, 12, "gelu", 0.2},
                        Case{20, {16, 9}, 5, 12, "sigmoid", 0.0, at::kBFloat16}}) {
  INFO(c.activation << ", dropout " << c.dropout << (c.autocast ? ", bf16 autocast" : ""));
  // Frozen: the first layer; the first two; the head only; the bias of the middle layer.
  const std::vector<std::vector<std::string>> frozen = {
      {"layers.0.weight", "layers.0.bias"},
      {"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"},
      {"layers.2.weight", "layers.2.bias"},
      {"layers.1.bias"},
  };
  for (const auto& names : frozen) {
    INFO("frozen: " << names.front() << " (" << names.size() << " tensors)");
    auto [a, b] = twins(c, 3);
    for (auto* net : {&a, &b})
      for (const auto& name : names) (*net)->named_parameters()[name].set_requires_grad(false);
    const auto x = torch::randn({c.rows, c.in});
    const auto y = torch::randint(0, c.out, {c.rows}, torch::kLong);
    at::Tensor la, lb;
    torch::manual_seed(5);
    autograd_part(a, x, y, 1.0, la, c.autocast);
    torch::manual_seed(5);
    MlpTape tape;
    taped_part(b, x, y, 1.0, lb, c.autocast, tape);
    REQUIRE(at::equal(la.detach(), lb));
    REQUIRE(grads_differ(a, b) == "");
    for (const auto& name : names) REQUIRE_FALSE(b->named_parameters()[name].grad().defined());
  }
  }
}

TEST_CASE("Mlp: the taped step takes every activation; it refuses an autocast dtype but bf16 and fp16, and a wrong tape",
          "[nn][mlp]") {
  for (const char* act : {"relu", "gelu", "sigmoid"}) REQUIRE(Mlp(MlpOptions(4, {3}, 2).activation(act))->taped_supported());
  REQUIRE(Mlp(MlpOptions(4, {}, 2))->taped_supported());
  REQUIRE(Mlp(MlpOptions(4, {3}, 2).activation("gelu").dropout(0.1))->taped_supported());
  MlpTape tape;
  Mlp two(MlpOptions(4, {3}, 2)), three(MlpOptions(4, {3, 3}, 2));
  REQUIRE_THROWS_WITH(two->forward_taped(torch::randn({2, 4}), tape, at::kFloat),
                      Catch::Contains("Mlp: forward_taped: autocast: expected bfloat16 or float16, got Float"));
  two->forward_taped(torch::randn({2, 4}), tape);
  REQUIRE_THROWS_WITH(three->backward_taped(torch::randn({2, 2}), tape),
                      Catch::Contains("Mlp: backward_taped: expected the tape of a forward_taped of these 3 layers, got 2 inputs"));
}

TEST_CASE("Mlp: a step's later micro-batches reuse the first one's casts, where they fit", "[nn][mlp]") {
  Mlp net(MlpOptions(6, {5}, 3));
  const auto x = torch::randn({4, 6});
  const auto g = torch::randn({4, 3}).to(at::kBFloat16);
  MlpTape tape;
  net->forward_taped(x, tape, at::kBFloat16, /*reuse_casts=*/true);  // nothing to reuse: cast
  REQUIRE(tape.casts.size() == 4);
  const auto w0 = tape.casts[0];
  REQUIRE(w0.scalar_type() == at::kBFloat16);
  REQUIRE(at::equal(w0, net->named_parameters()["layers.0.weight"].to(at::kBFloat16)));
  net->backward_taped(g, tape, /*keep_casts=*/true);
  REQUIRE(tape.casts.size() == 4);
  net->forward_taped(x, tape, at::kBFloat16, /*reuse_casts=*/true);
  REQUIRE(tape.casts[0].is_same(w0));  // reused, not cast again
  net->backward_taped(g, tape, /*keep_casts=*/true);
  net->forward_taped(x, tape, at::kBFloat16);  // a new step: cast again
  REQUIRE_FALSE(tape.casts[0].is_same(w0));
  net->backward_taped(g, tape, /*keep_casts=*/true);
  net->forward_taped(x, tape, at::kHalf, /*reuse_casts=*/true);  // another dtype: cast again
  REQUIRE(tape.casts[0].scalar_type() == at::kHalf);
  net->backward_taped(g.to(at::kHalf), tape);
  REQUIRE(tape.casts.empty());
  net->forward_taped(x, tape, std::nullopt, /*reuse_casts=*/true);  // float32: no casts at all
  REQUIRE(tape.casts.empty());
}
