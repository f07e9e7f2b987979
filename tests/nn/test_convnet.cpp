// kiln::nn::ConvNet: images flat or shaped give the same logits, channels-last too;
// BatchNorm's running statistics are buffers that eval() uses, that checkpoints keep
// (model.safetensors) and that a resumed run continues bit for bit; a table cannot
// feed it.
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <fstream>
#include <map>
#include <string>
#include <string_view>

#include "nn/convnet.h"
#include "nn/factory.h"
#include "ops/linear/linear_onednn.h"
#include "run_files.h"
#include "support.h"
#include "train/amp.h"
#include "train/checkpoint.h"
#include "util/error.h"

namespace {

// The tiny config (Fashion-MNIST) with `overrides`, or a resume of `resume`.
int train(const std::string& run_dir, std::vector<std::string> overrides, const std::string& resume = "") {
  return kiln::test::train("configs/tiny.toml", run_dir, std::move(overrides), resume);
}

}  // namespace

TEST_CASE("ConvNet: flat or shaped images, contiguous or channels-last, the same logits",
          "[nn][convnet]") {
  torch::manual_seed(0);
  kiln::nn::ConvNet net(kiln::nn::ConvNetOptions({1, 28, 28}, 10).channels({8, 16}).pool_after({1, 2}).hidden(32));
  const auto x = at::randn({5, 1, 28, 28});
  const auto y = net->forward(x);
  REQUIRE(y.sizes() == at::IntArrayRef{5, 10});
  REQUIRE(at::equal(net->forward(x.reshape({5, 784})), y));
  net->options.channels_last(true);
  KILN_REQUIRE_CLOSE(net->forward(x), y, 1e-5, 1e-5);
  // Built channels-last, the filters are NHWC too (oneDNN's fast path), with the same values.
  torch::manual_seed(0);
  kiln::nn::ConvNet nhwc(kiln::nn::ConvNetOptions({1, 28, 28}, 10).channels({8, 16}).pool_after({1, 2}).hidden(32).channels_last(true));
  for (const auto& p : nhwc->named_parameters()) {
    INFO(p.key());
    if (p.value().dim() == 4) {  // (out, in, 3, 3) with channels-last strides, even with in = 1
      const auto& w = p.value();
      REQUIRE(w.strides() == at::IntArrayRef({w.size(1) * 9, 1, 3 * w.size(1), w.size(1)}));
    }
  }
  KILN_REQUIRE_CLOSE(nhwc->forward(x), y, 1e-5, 1e-5);
  REQUIRE(net->head_parameters() == std::vector<std::string>{"output.weight", "output.bias"});
  CHECK_THROWS_WITH(kiln::nn::ConvNet(kiln::nn::ConvNetOptions({784}, 10)),
                    Catch::Contains("ConvNet: input_shape: expected (C, H, W) or (H, W)"));
  CHECK_THROWS_WITH(kiln::nn::ConvNet(kiln::nn::ConvNetOptions({1, 3, 3}, 10).pool_after({1, 2})),
                    Catch::Contains("pools a 1×1 image"));
  kiln::nn::ModelSpec spec;
  spec.name = "convnet";
  CHECK_THROWS_AS(kiln::nn::fit_to_data(spec, {9}, 9, 3), kiln::InputError);
  // Pools that leave nothing to pool are the config's to fix, named before the model is
  // built: 28×28 halves four times (14, 7, 3, 1), the fifth pool has a 1×1 image.
  spec.convnet.channels({2, 2, 2, 2, 2}).pool_after({1, 2, 3, 4, 5});
  CHECK_THROWS_AS(kiln::nn::fit_to_data(spec, {1, 28, 28}, 28 * 28, 10), kiln::InputError);
  CHECK_THROWS_WITH(kiln::nn::fit_to_data(spec, {1, 28, 28}, 28 * 28, 10),
                    Catch::Equals("model.pool_after: block 5 pools a 1×1 image (the data's 28×28 after 4 pools); "
                                  "expected at most 4 pooling blocks for 28×28 images"));
  CHECK_THROWS_WITH(kiln::nn::fit_to_data(spec, {1, 1, 1}, 1, 10),
                    Catch::Equals("model.pool_after: block 1 pools a 1×1 image (the data's 1×1 after 0 pools); "
                                  "expected at most 0 pooling blocks for 1×1 images"));
  spec.convnet.pool_after({1, 2, 3, 4});
  kiln::nn::fit_to_data(spec, {1, 28, 28}, 28 * 28, 10);
  spec = kiln::nn::ModelSpec();
  spec.name = "convnet";
  // Images that look channels-last (H, W, C) warn, once each; (C, H, W) ones do not.
  const kiln::test::CapturedWarnings captured;
  const auto& warnings = captured.messages();
  kiln::nn::fit_to_data(spec, {32, 32, 4}, 32 * 32 * 4, 10);
  kiln::nn::fit_to_data(spec, {3, 32, 32}, 32 * 32 * 3, 10);
  kiln::nn::fit_to_data(spec, {1, 28, 28}, 28 * 28, 10);
  kiln::nn::fit_to_data(spec, {28, 28}, 28 * 28, 10);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("examples of shape [32, 32, 4] are read as (C, H, W): 32 channels of "
                                          "32 x 4 pixels; if they are (H, W, C) images (channels last), "
                                          "transpose them first (NumPy: x.transpose(0, 3, 1, 2))"));
}

TEST_CASE("ConvNet: BatchNorm's running statistics are trained, used by eval() and kept",
          "[nn][convnet]") {
  torch::manual_seed(1);
  kiln::nn::ConvNet net(kiln::nn::ConvNetOptions({1, 8, 8}, 3).channels({4}).pool_after({}).hidden(0));
  std::map<std::string, at::Tensor> buffers;
  for (const auto& b : net->named_buffers()) buffers[b.key()] = b.value().clone();
  REQUIRE(buffers.count("norms.0.running_mean"));
  REQUIRE(buffers.count("norms.0.running_var"));
  const auto x = at::randn({16, 1, 8, 8}) * 3 + 2;
  net->train();
  net->forward(x);
  REQUIRE_FALSE(at::equal(net->named_buffers()["norms.0.running_mean"], buffers["norms.0.running_mean"]));
  // In eval mode an example's logits do not depend on the rest of its batch.
  net->eval();
  const auto alone = net->forward(x.narrow(0, 0, 1));
  KILN_REQUIRE_CLOSE(net->forward(x).narrow(0, 0, 1), alone, 1e-5, 1e-6);
}

TEST_CASE("ConvNet on the CPU runs kiln::batch_norm with the ReLU fused: torch's arithmetic, one op",
          "[nn][convnet][batch_norm]") {
  torch::manual_seed(2);
  kiln::nn::ConvNet net(kiln::nn::ConvNetOptions({2, 6, 6}, 3).channels({5}).pool_after({}).hidden(0).channels_last(true));
  net->train();
  auto params = net->named_parameters();
  auto buffers = net->named_buffers();
  // The reference: ATen's conv, batch norm and relu on copies of the same parameters.
  const auto copy = [](const at::Tensor& t) { return t.detach().clone().requires_grad_(true); };
  auto cw = copy(params["convs.0.weight"]), nw = copy(params["norms.0.weight"]), nb = copy(params["norms.0.bias"]);
  auto ow = copy(params["output.weight"]), ob = copy(params["output.bias"]);
  auto rm = buffers["norms.0.running_mean"].clone(), rv = buffers["norms.0.running_var"].clone();
  const auto x = at::randn({7, 2, 6, 6}) * 2 + 1;
  const auto h = at::relu(at::batch_norm(at::conv2d(x, cw, {}, 1, 1), nw, nb, rm, rv, true, 0.1, 1e-5, false));
  const auto expected = at::linear(h.flatten(1), ow, ob);
  expected.square().sum().backward();
  // kiln's: calls recorded by name.
  static thread_local std::map<std::string, int> calls;
  calls.clear();
  const auto handle = at::addThreadLocalCallback(at::RecordFunctionCallback(
      [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        ++calls[fn.name()];
        return nullptr;
      }));
  const auto logits = net->forward(x);
  at::removeCallback(handle);
  logits.square().sum().backward();
  CHECK(calls["kiln::batch_norm"] == 1);
  CHECK(calls["aten::batch_norm"] == 0);
  CHECK(calls["kiln::relu"] == 0);
  KILN_REQUIRE_CLOSE(logits, expected, 1e-5, 1e-5);
  KILN_REQUIRE_CLOSE(buffers["norms.0.running_mean"], rm, 1e-6, 1e-6);
  KILN_REQUIRE_CLOSE(buffers["norms.0.running_var"], rv, 1e-6, 1e-6);
  CHECK(buffers["norms.0.num_batches_tracked"].item<int64_t>() == 1);
  KILN_REQUIRE_CLOSE(params["convs.0.weight"].grad(), cw.grad(), 1e-4, 1e-5);
  KILN_REQUIRE_CLOSE(params["norms.0.weight"].grad(), nw.grad(), 1e-4, 1e-5);
  KILN_REQUIRE_CLOSE(params["norms.0.bias"].grad(), nb.grad(), 1e-4, 1e-5);
  // Evaluation uses the running statistics and leaves them alone.
  net->eval();
  const auto before = buffers["norms.0.running_mean"].clone();
  const auto e = at::linear(
      at::relu(at::batch_norm(at::conv2d(x, cw, {}, 1, 1), nw, nb, rm, rv, false, 0.1, 1e-5, false)).flatten(1), ow, ob);
  KILN_REQUIRE_CLOSE(net->forward(x), e, 1e-5, 1e-5);
  CHECK(at::equal(buffers["norms.0.running_mean"], before));
}

TEST_CASE("ConvNet channels-last: kiln's pools, and the backward copies no activation between layouts", "[nn][convnet]") {
  // The flatten before the head hands its gradient back in NCHW; unless it is made
  // channels-last there, ATen's max-pool backward copies its (B, 8, 4, 4) operands to
  // NCHW and its result back.
  torch::manual_seed(3);
  kiln::nn::ConvNet net(
      kiln::nn::ConvNetOptions({1, 8, 8}, 3).channels({4, 8}).pool_after({1, 2}).hidden(16).channels_last(true));
  // The pools are kiln's (kiln::max_pool2), not ATen's.
  static thread_local std::map<std::string, int> calls;
  calls.clear();
  const auto names = at::addThreadLocalCallback(at::RecordFunctionCallback(
      [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        ++calls[fn.name()];
        return nullptr;
      }));
  const auto loss = net->forward(at::randn({6, 1, 8, 8})).square().sum();
  at::removeCallback(names);
  CHECK(calls["kiln::max_pool2"] == 2);
  CHECK(calls["aten::max_pool2d"] == 0);
  CHECK(calls["aten::max_pool2d_with_indices"] == 0);
  static thread_local int64_t copies = 0;
  copies = 0;
  const auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        const auto inputs = fn.inputs();
        if (std::string_view(fn.name()) == "aten::copy_" && !inputs.empty() && inputs[0].isTensor() &&
            inputs[0].toTensor().sizes() == at::IntArrayRef({6, 8, 4, 4}))
          ++copies;
        return nullptr;
      }).needsInputs(true));
  loss.backward();
  at::removeCallback(handle);
  CHECK(copies == 0);
}

TEST_CASE("ConvNet under CPU autocast: where bf16 products run as float32 ones, so do its convolutions",
          "[nn][convnet][linear]") {
  // Where kiln::linear runs bf16 and fp16 products as float32 ones (no fast bf16
  // products on this CPU, or KILN_CPU_REDUCED_PRODUCTS=float32), the convolutions run in
  // float32 on rounded operands, their results rounded to autocast's dtype; else (=native)
  // autocast's own bf16 convolutions. Either way the logits and gradients stay within
  // bf16's rounding of float32's, contiguous and channels-last.
  const bool routed = kiln::ops::linear_reduced_in_float32();
  static thread_local std::map<at::ScalarType, int> convs;
  const auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        const auto inputs = fn.inputs();
        if (std::string_view(fn.name()) == "aten::convolution" && !inputs.empty() && inputs[0].isTensor())
          ++convs[inputs[0].toTensor().scalar_type()];
        return nullptr;
      }).needsInputs(true));
  for (const auto dtype : {at::kBFloat16, at::kHalf}) {
    for (const bool nhwc : {false, true}) {
      INFO("dtype " << dtype << ", channels-last " << nhwc << ", routed " << routed);
      torch::manual_seed(5);
      kiln::nn::ConvNet net(
          kiln::nn::ConvNetOptions({1, 12, 12}, 4).channels({6, 8}).pool_after({1, 2}).hidden(16).channels_last(nhwc));
      const auto x = at::randn({7, 1, 12, 12});
      const auto y = net->forward(x);
      y.square().sum().backward();
      std::vector<at::Tensor> grads;
      for (auto& p : net->parameters()) grads.push_back(p.grad().clone()), p.mutable_grad().reset();
      convs.clear();
      at::Tensor yh;
      {
        kiln::train::AutocastGuard amp(at::kCPU, dtype);
        yh = net->forward(x);
      }
      CHECK(convs[dtype] == (routed ? 0 : 2));
      CHECK(convs[at::kFloat] == (routed ? 2 : 0));
      REQUIRE(yh.scalar_type() == dtype);
      KILN_REQUIRE_CLOSE(yh.to(at::kFloat), y, 0.1, 0.1);
      yh.to(at::kFloat).square().sum().backward();
      const auto params = net->parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        REQUIRE(params[i].grad().scalar_type() == at::kFloat);
        const double scale = grads[i].abs().max().item<double>();
        KILN_REQUIRE_CLOSE(params[i].grad(), grads[i], 0.1, 0.1 * scale + 1e-3);
      }
    }
  }
  at::removeCallback(handle);
}

TEST_CASE("ConvNet trains from config with augmented images; a run stopped and resumed ends bit for bit, running statistics included",
          "[train][convnet]") {
  kiln::test::TempDir dir;
  const std::vector<std::string> common = {
      "model.name=convnet", "model.channels=[8, 8]", "model.pool_after=[1, 2]", "model.head=32",
      "model.channels_last=true", "data.train_limit=640", "data.test_limit=200", "train.epochs=2",
      "train.threads=1", "data.augment_flip=true", "data.augment_crop=2"};
  REQUIRE(train(dir / "straight", common) == 0);
  auto stopped = common;
  stopped.push_back("train.max_steps=13");  // mid-epoch: 10 batches an epoch
  REQUIRE(train(dir / "resumed", stopped) == 0);
  REQUIRE(train("", {"train.max_steps=0"}, dir / "resumed") == 0);
  REQUIRE(kiln::test::final_weights_differ(dir / "straight", dir / "resumed") == "");
  bool has_running_mean = false;  // the running statistics are among what was compared
  for (const auto& [name, t] : kiln::test::final_weights(dir / "straight"))
    has_running_mean = has_running_mean || name == "norms.1.running_mean";
  REQUIRE(has_running_mean);
  const auto last = kiln::test::last_test_line(dir / "straight");
  REQUIRE(last["accuracy"].get<double>() > 0.5);
}

TEST_CASE("augmentation needs images", "[train][convnet]") {
  kiln::test::TempDir dir;
  std::ofstream(dir / "t.csv") << "a,b,y\n1,2,p\n3,4,q\n5,6,p\n7,8,q\n";
  REQUIRE_THROWS_WITH(train(dir / "run", {"data.train=" + (dir / "t.csv"), "data.label=y",
                                          "data.augment_flip=true"}),
                      Catch::Contains("data.augment_flip, data.augment_crop: expected image data, "
                                      "examples of shape (C, H, W) or (H, W), found [2]"));
}
