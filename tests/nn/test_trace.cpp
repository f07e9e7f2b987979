// Every module of every model in nn::model_names() reports its forward's output to
// the active OutputTracer (kiln's modules themselves, libtorch's Conv2d, BatchNorm2d
// and Embedding through the kiln module that calls them), with the shape the
// forward really made; only containers have none. Without a tracer nothing is
// recorded, and tracers nest.
#include <torch/torch.h>

#include <map>

#include "nn/factory.h"
#include "nn/trace.h"
#include "train/amp.h"
#include "support.h"

namespace {

using Shapes = std::map<std::string, std::vector<int64_t>>;

struct ModelCase {
  kiln::nn::ModelSpec spec;
  at::Tensor input;
  Shapes expected;  // the output shape of every module that is not a container
};

// Small models of each registered name, a batch of 4 and every module's output shape.
std::vector<ModelCase> model_cases() {
  std::vector<ModelCase> cases;
  const at::Tensor images = at::randn({4, 1, 28, 28});
  for (const auto& name : kiln::nn::model_names()) {
    ModelCase c;
    c.spec.name = name;
    c.input = images;
    if (name == "mlp") {
      c.spec.mlp = kiln::nn::MlpOptions(784, {12, 8}, 10);
      c.expected = {{"", {4, 10}}, {"layers.0", {4, 12}}, {"layers.1", {4, 8}}, {"layers.2", {4, 10}}};
    } else if (name == "deep_mlp" || name == "dynamic_mlp") {
      // gelu: the hidden Linear's output comes from the fused linear_gelu.
      c.spec.deep_mlp = kiln::nn::DeepMlpOptions(784, 10).layers(3).width(16).activation("gelu").checkpoint_every(2);
      c.spec.dynamic_mlp = kiln::nn::DynamicMlpOptions(784, 10).max_depth(3).width(16);
      c.expected = {{"", {4, 10}}, {"input", {4, 16}}, {"layers.0", {4, 16}}, {"layers.1", {4, 16}},
                    {"layers.2", {4, 16}}, {"output", {4, 10}}};
    } else if (name == "convnet") {
      c.spec.convnet = kiln::nn::ConvNetOptions({1, 28, 28}, 10).channels({4, 8}).pool_after({1}).hidden(6);
      c.expected = {{"", {4, 10}},           {"convs.0", {4, 4, 28, 28}}, {"norms.0", {4, 4, 28, 28}},
                    {"convs.1", {4, 8, 14, 14}}, {"norms.1", {4, 8, 14, 14}}, {"hidden", {4, 6}},
                    {"output", {4, 10}}};
    } else if (name == "gpt") {
      // Untied, so the head is a module of its own; (B, T) = (4, 16), width 32, vocabulary 50.
      c.spec.gpt = kiln::nn::GptOptions(50, 16).layers(2).width(32).heads(4).tie_embeddings(false);
      c.input = at::randint(0, 50, {4, 16});
      c.expected = {{"", {4, 16, 50}}, {"token_embedding", {4, 16, 32}}, {"position_embedding", {16, 32}},
                    {"norm", {64, 32}}, {"head", {64, 50}}};
      for (const std::string b : {"blocks.0", "blocks.1"}) {
        c.expected[b] = {4, 16, 32};
        c.expected[b + ".norm1"] = {4, 16, 32};
        c.expected[b + ".attn"] = {64, 96};  // (B·T, 3C): q, k and v
        c.expected[b + ".proj"] = {64, 32};
        c.expected[b + ".norm2"] = {4, 16, 32};
        c.expected[b + ".fc"] = {64, 128};  // linear_gelu, 4 × width
        c.expected[b + ".out"] = {64, 32};
      }
    }
    REQUIRE(!c.expected.empty());  // a model added to the registry gets a case here
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace

TEST_CASE("every module of every model reports its output shape to the tracer", "[nn][trace]") {
  for (auto& c : model_cases()) {
    INFO(c.spec.name);
    torch::manual_seed(0);
    auto model = kiln::nn::make_model(c.spec);
    kiln::nn::OutputTracer tracer;
    const auto out = model.forward(c.input);
    for (const auto& item : model.ptr()->named_modules("", /*include_self=*/true)) {
      INFO("module '" << item.key() << "' (" << item.value()->name() << ")");
      const auto* recorded = tracer.find(*item.value());
      if (dynamic_cast<const torch::nn::ModuleListImpl*>(item.value().get())) {
        REQUIRE(recorded == nullptr);  // a container runs no forward of its own
        continue;
      }
      REQUIRE(recorded != nullptr);
      REQUIRE(c.expected.count(item.key()) == 1);
      REQUIRE(recorded->shape == c.expected.at(item.key()));
      REQUIRE(recorded->dtype == at::kFloat);
      REQUIRE(recorded->calls == 1);
    }
    REQUIRE(tracer.find(*model.ptr())->shape == out.sizes().vec());
  }
}

TEST_CASE("the tracer records autocast's dtype, only while it lives, and nests", "[nn][trace]") {
  kiln::nn::Mlp model(kiln::nn::MlpOptions(6, {5}, 3));
  const auto x = at::randn({2, 6});
  model->forward(x);  // no tracer: nothing to record into, nothing breaks
  REQUIRE(kiln::nn::OutputTracer::active() == nullptr);
  {
    kiln::nn::OutputTracer outer;
    {
      kiln::nn::OutputTracer inner;
      REQUIRE(kiln::nn::OutputTracer::active() == &inner);
      {
        kiln::train::AutocastGuard amp(at::kCPU, at::kBFloat16);
        model->forward(x);
      }
      REQUIRE(inner.find(*model)->dtype == at::kBFloat16);
      REQUIRE(outer.find(*model) == nullptr);  // the innermost tracer records
    }
    REQUIRE(kiln::nn::OutputTracer::active() == &outer);
    model->forward(x);
    model->forward(x);
    REQUIRE(outer.find(*model)->calls == 2);
    REQUIRE(outer.find(*model)->dtype == at::kFloat);
  }
  REQUIRE(kiln::nn::OutputTracer::active() == nullptr);
}
