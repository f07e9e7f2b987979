// kiln::nn::DeepMlp: its defaults, stable parameter names, shapes, evaluation
// without dropout, a signal that survives 50 layers, and the errors for bad options.
#include <torch/torch.h>

#include "nn/deep_mlp.h"
#include "support.h"

using kiln::nn::DeepMlp;
using kiln::nn::DeepMlpOptions;

TEST_CASE("DeepMlp defaults to the documents' 50 layers of width 1024", "[nn][deep_mlp]") {
  const DeepMlpOptions o(784, 10);
  REQUIRE(o.layers() == 50);
  REQUIRE(o.width() == 1024);
  REQUIRE(o.activation().name() == "relu");
  REQUIRE(o.dropout() == 0.0);
  REQUIRE(o.checkpoint_every() == 0);
}

TEST_CASE("DeepMlp parameter names are input.*, layers.<i>.*, output.* in order",
          "[nn][deep_mlp]") {
  DeepMlp net(DeepMlpOptions(6, 3).layers(3).width(8).checkpoint_every(2));
  std::vector<std::string> names;
  for (const auto& p : net->named_parameters()) names.push_back(p.key());
  const std::vector<std::string> expected = {
      "input.weight",    "input.bias",      "layers.0.weight", "layers.0.bias", "layers.1.weight",
      "layers.1.bias",   "layers.2.weight", "layers.2.bias",   "output.weight", "output.bias"};
  REQUIRE(names == expected);
  REQUIRE(net->named_parameters()["layers.1.weight"].sizes() == at::IntArrayRef({8, 8}));
  REQUIRE(net->named_parameters()["output.weight"].sizes() == at::IntArrayRef({3, 8}));
}

TEST_CASE("DeepMlp maps (B, …) to (B, out) and evaluates without dropout", "[nn][deep_mlp]") {
  torch::manual_seed(2);
  DeepMlp net(DeepMlpOptions(12, 4).layers(4).width(8).dropout(0.5).checkpoint_every(2));
  net->eval();
  const auto x = at::randn({5, 3, 4});
  const auto y = net->forward(x);
  REQUIRE(y.sizes() == at::IntArrayRef({5, 4}));
  REQUIRE(at::equal(net->forward(x), y));  // no dropout in eval mode
  // Without grad mode the checkpointed model computes what the plain one does.
  DeepMlp plain(DeepMlpOptions(net->options).checkpoint_every(0));
  {
    torch::NoGradGuard no_grad;
    for (auto& p : plain->named_parameters()) p.value().copy_(net->named_parameters()[p.key()]);
  }
  plain->eval();
  torch::NoGradGuard no_grad;
  REQUIRE(at::equal(plain->forward(x), net->forward(x)));
}

TEST_CASE("after 50 layers DeepMlp's output still depends on its input (He initialisation)",
          "[nn][deep_mlp]") {
  torch::manual_seed(6);
  DeepMlp net(DeepMlpOptions(64, 10).layers(50).width(128));
  torch::NoGradGuard no_grad;
  const auto y = net->forward(at::randn({32, 64}));
  // How much the outputs vary over the batch, relative to their size: ~1e-7 with
  // torch's default Linear initialisation, where the input is forgotten.
  const double variation = (y.std(0).mean() / y.abs().mean()).item<double>();
  INFO("relative variation over the batch " << variation);
  REQUIRE(variation > 0.05);
}

TEST_CASE("DeepMlp rejects bad options, naming the option and the valid values",
          "[nn][deep_mlp]") {
  REQUIRE_THROWS_WITH(DeepMlp(DeepMlpOptions(4, 2).activation("tanh")),
                      Catch::Contains("DeepMlp: activation: expected one of relu, gelu, sigmoid, got \"tanh\""));
  REQUIRE_THROWS_WITH(DeepMlp(DeepMlpOptions(4, 2).checkpoint_every(-1)),
                      Catch::Contains("checkpoint_every: expected ≥ 0"));
  REQUIRE_THROWS_WITH(DeepMlp(DeepMlpOptions(4, 2).dropout(1.0)), Catch::Contains("dropout"));
  REQUIRE_THROWS_WITH(DeepMlp(DeepMlpOptions(4, 2).width(0)), Catch::Contains("width: expected > 0"));
}
