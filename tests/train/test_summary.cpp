// kiln summary against the step it predicts: for each model's config in configs/
// (small data, the configured batch size and precision), the memory estimate —
// activations measured on meta or by short steps on the device — is within 10 % of
// what ActivationProbe measures around a real training step at that batch, and the
// parameter, gradient and optimizer-state bytes are exactly the real step's. Every
// module of the table has an output shape or says why not; the method is the one
// the config allows; the meta probe counts what it should.
#include <torch/torch.h>

#include <cstdio>
#include <fstream>

#include "config.h"
#include "support.h"
#include "train/amp.h"
#include "train/device.h"
#include "train/meta_memory.h"
#include "train/run_parts.h"
#include "train/summary.h"
#include "train_command.h"

namespace {

using kiln::train::RunSpec;

RunSpec spec_of(const std::string& config, const std::vector<std::string>& overrides) {
  return kiln::app::to_run_spec(kiln::app::resolve_config(config, overrides));
}

struct RealStep {
  int64_t activation_bytes = 0;
  kiln::train::ModelMemory memory;
};

// One training step as the trainer takes it (Run::step: a shuffled batch of the
// configured size, zero_grad, forward and loss under the precision's autocast,
// backward through the GradScaler, the optimizer step), ActivationProbe around it;
// the third step is measured, the first two make what later steps reuse.
RealStep real_step(const RunSpec& spec) {
  const auto& t = spec.train;
  const auto device = kiln::train::resolve_device(t.device());
  const auto plan = kiln::train::precision_plan(t.precision(), device.type());
  if (t.threads() > 0) at::set_num_threads(static_cast<int>(t.threads()));
  const auto data = kiln::train::load_run_data(spec.data, spec.model.name);
  torch::manual_seed(t.seed());
  auto model = kiln::train::build_model(spec.model, data.schema);
  model.ptr()->to(device);
  auto optimizer = kiln::train::build_optimizer(spec.optim, *model.ptr());
  kiln::train::GradScaler scaler(kiln::train::GradScalerOptions().enabled(plan.loss_scaling));
  const int64_t rows = std::min(t.batch_size(), data.train.size());
  const int64_t micro = (rows + t.accumulate() - 1) / t.accumulate();
  RealStep real;
  for (int step = 0; step < 3; ++step) {
    const auto index = at::randperm(data.train.size()).narrow(0, 0, micro);
    const auto x = data.train.x.index_select(0, index).to(device);
    const auto y = data.train.y.index_select(0, index).to(device);
    optimizer->zero_grad();
    kiln::train::ActivationProbe probe(device);
    at::Tensor loss;
    {
      kiln::train::AutocastGuard amp(device.type(), plan.dtype, plan.autocast);
      loss = kiln::train::training_loss(model.forward(kiln::data::model_inputs(x, data.schema)), y, data.schema);
    }
    probe.forward_done();
    scaler.scale(loss).backward();
    real.activation_bytes = probe.bytes();
    scaler.unscale_(*optimizer);
    scaler.step(*optimizer);
    scaler.update();
  }
  real.memory = kiln::train::model_memory(*optimizer);
  return real;
}

std::string write_corpus(const kiln::test::TempDir& dir) {
  const std::string path = dir / "corpus.txt";
  std::ofstream text(path);
  for (int i = 0; i < 200; ++i) text << "the cat sat on the mat. a dog ran.\n";
  return path;
}

}  // namespace

TEST_CASE("the summary's memory estimate is within 10 % of a real step's, for each model's config",
          "[train][summary]") {
  kiln::test::TempDir dir;
  const std::string corpus = write_corpus(dir);
  const std::vector<std::string> images = {"data.train_limit=256", "data.test_limit=100", "train.threads=1"};
  const auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), images.begin(), images.end());
    return extra;
  };
  const std::vector<std::pair<std::string, std::vector<std::string>>> configs = {
      {"configs/fashion_mlp.toml", with({})},
      {"configs/deep_mlp_checkpointed.toml", with({"model.depth=10"})},  // 50 layers: a slow real step
      {"configs/dynamic_mlp.toml", with({})},
      {"configs/fashion_convnet.toml", with({})},
      {"configs/gpt_char.toml", {"data.train=" + corpus, "train.threads=1"}},
      {"configs/text_chars.toml", {"data.train=" + corpus, "train.threads=1"}},
  };
  for (const auto& [config, overrides] : configs) {
    INFO(config);
    const auto spec = spec_of(config, overrides);
    const auto real = real_step(spec);
    // fp32: the meta device, and the device method too; autocast: the device only.
    std::vector<std::string> methods = {"auto"};
    if (spec.train.precision() == "fp32") methods.push_back("device");
    for (const auto& method : methods) {
      INFO("activations: " << method);
      const auto summary = kiln::train::summarize(spec, kiln::train::SummaryOptions().activations(method));
      const auto& e = summary.memory;
      const double off = static_cast<double>(e.activation_bytes - real.activation_bytes) /
                         static_cast<double>(real.activation_bytes);
      std::printf("summary: %-36s %-5s %-6s batch %4lld: activations estimated %11lld, measured %11lld (%+.1f %%)\n",
                  config.c_str(), e.precision.c_str(), e.method.c_str(), static_cast<long long>(e.micro_batch),
                  static_cast<long long>(e.activation_bytes), static_cast<long long>(real.activation_bytes),
                  100.0 * off);
      INFO(summary.table());
      REQUIRE(e.method == (method == "device" || spec.train.precision() != "fp32" ? "device" : "meta"));
      REQUIRE(std::abs(off) <= 0.10);
      REQUIRE(e.parameter_bytes == real.memory.parameter_bytes);
      REQUIRE(e.gradient_bytes == real.memory.gradient_bytes);
      REQUIRE(e.optimizer_state_bytes == real.memory.optimizer_state_bytes);
      REQUIRE(e.optimizer_state_bytes > 0);
      REQUIRE(e.batch_size == spec.train.batch_size());
      // Every module has its output shape, or a container says why it has none.
      REQUIRE(summary.modules.size() > 1);
      for (const auto& row : summary.modules) {
        INFO("module '" << row.name << "'");
        if (row.type == "torch::nn::ModuleList") {
          REQUIRE(!row.shape);
          REQUIRE(row.no_output.find("container") != std::string::npos);
        } else {
          REQUIRE(row.shape);
        }
      }
      REQUIRE((*summary.modules[0].shape)[0] == e.micro_batch);  // the model's output: one row per example
      REQUIRE(summary.table().find("(1) a container") != std::string::npos);
    }
  }
}

TEST_CASE("the summary measures on meta only where the whole step runs there, and says why not",
          "[train][summary]") {
  const std::vector<std::string> small = {"data.train_limit=64", "data.test_limit=10", "train.threads=1",
                                          "train.batch_size=8"};
  const auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), small.begin(), small.end());
    return extra;
  };
  const auto mlp = kiln::train::summarize(spec_of("configs/tiny.toml", with({})));
  REQUIRE(mlp.memory.method == "meta");
  REQUIRE(mlp.memory.step_peak_bytes);  // the peak through backward, which only meta and CUDA see
  REQUIRE(*mlp.memory.step_peak_bytes >= mlp.memory.activation_bytes);  // backward frees them as it goes
  REQUIRE(*mlp.memory.step_peak_bytes >= mlp.memory.gradient_bytes);    // all alive when it ends

  const auto bf16 = kiln::train::summarize(spec_of("configs/tiny.toml", with({"train.precision=bf16"})));
  REQUIRE(bf16.memory.method == "device");
  REQUIRE(bf16.memory.method_detail.find("bf16 autocast does not run on the meta device") != std::string::npos);
  REQUIRE(bf16.memory.method_detail.find("at batch 8") != std::string::npos);  // small: measured as it is
  REQUIRE(!bf16.memory.step_peak_bytes);  // the CPU heap keeps no peak

  const auto convnet_spec = spec_of("configs/fashion_convnet.toml",
                                    with({"train.precision=fp32", "model.channels=[4, 8, 8, 8]", "model.head=16"}));
  const auto convnet = kiln::train::summarize(convnet_spec);
  REQUIRE(convnet.memory.method == "device");
  REQUIRE(convnet.memory.method_detail.find("torch::nn::BatchNorm2d (norms.3) cannot move to the meta device") !=
          std::string::npos);
  REQUIRE(kiln::test::input_error_of([&] {
            kiln::train::summarize(convnet_spec, kiln::train::SummaryOptions().activations("meta"));
          }).find("cannot move to the meta device") != std::string::npos);
  for (const auto& row : convnet.modules) {  // the device run traced the rebuilt model
    INFO(row.name);
    REQUIRE((row.shape || row.type == "torch::nn::ModuleList"));
  }
}

TEST_CASE("MetaMemoryProbe counts the meta storages made and freed while it lives, and their peak",
          "[train][summary]") {
  const auto meta = at::TensorOptions().device(at::kMeta);
  const auto before = at::empty({1000}, meta);  // made before: not counted, its death neither
  kiln::train::MetaMemoryProbe probe;
  auto a = at::empty({256}, meta);                       // 1 KiB
  auto b = at::empty({64, 64}, meta.dtype(at::kBFloat16));  // 8 KiB
  probe.forward_done();
  REQUIRE(probe.forward_bytes() == 1024 + 8192);
  b.reset();
  auto c = at::empty({16}, meta.dtype(at::kDouble));  // 128 B
  REQUIRE(probe.live_bytes() == 1024 + 128);
  REQUIRE(probe.peak_bytes() == 1024 + 8192);
  REQUIRE_THROWS_WITH(kiln::train::MetaMemoryProbe(), Catch::Contains("another probe is counting already"));
}
