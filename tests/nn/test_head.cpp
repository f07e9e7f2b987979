// A model names its own output head: the names are the model's own parameter
// names, they follow the model's shape, and make_model's result answers for any
// model it builds (a module that names no head gives none).
#include <torch/torch.h>

#include "nn/factory.h"
#include "support.h"

namespace {

std::vector<std::string> names_of(const torch::nn::Module& m) {
  std::vector<std::string> names;
  for (const auto& p : m.named_parameters()) names.push_back(p.key());
  return names;
}

}  // namespace

TEST_CASE("Mlp names its last Linear as the head, whatever its depth", "[nn][head]") {
  kiln::nn::Mlp two(kiln::nn::MlpOptions(10, {6, 5}, 3));
  REQUIRE(two->head_parameters() == std::vector<std::string>{"layers.2.weight", "layers.2.bias"});
  REQUIRE(two->named_parameters()["layers.2.weight"].sizes() == torch::IntArrayRef{3, 5});
  kiln::nn::Mlp linear(kiln::nn::MlpOptions(10, {}, 3));  // no hidden layer: the head is all
  REQUIRE(linear->head_parameters() == names_of(*linear));
}

TEST_CASE("DeepMlp names output.* as the head", "[nn][head]") {
  kiln::nn::DeepMlp net(kiln::nn::DeepMlpOptions(6, 3).layers(2).width(4));
  REQUIRE(net->head_parameters() == std::vector<std::string>{"output.weight", "output.bias"});
}

TEST_CASE("head_parameters answers for every model make_model builds", "[nn][head]") {
  for (const auto& name : kiln::nn::model_names()) {
    INFO(name);
    kiln::nn::ModelSpec spec;
    spec.name = name;
    spec.mlp = kiln::nn::MlpOptions(8, {4}, 3);
    spec.deep_mlp = kiln::nn::DeepMlpOptions(8, 3).layers(2).width(4);
    spec.dynamic_mlp = kiln::nn::DynamicMlpOptions(8, 3).max_depth(2).width(4);
    spec.convnet = kiln::nn::ConvNetOptions({1, 4, 2}, 3).channels({2}).pool_after({}).hidden(4);
    spec.gpt = kiln::nn::GptOptions(3, 4).layers(1).width(4).heads(2);
    const auto model = kiln::nn::make_model(spec);
    const auto head = kiln::nn::head_parameters(*model.ptr());
    // A weight and a bias; the GPT's head is its token embedding (tied): (vocabulary, width).
    REQUIRE(head.size() == (name == "gpt" ? 1u : 2u));
    const auto all = model.ptr()->named_parameters();
    for (const auto& h : head) {
      INFO(h);
      REQUIRE(all.contains(h));
      REQUIRE(all[h].size(0) == 3);  // the head makes the 3 logits
    }
  }
  REQUIRE(kiln::nn::head_parameters(*torch::nn::Linear(3, 2).ptr()).empty());
}
