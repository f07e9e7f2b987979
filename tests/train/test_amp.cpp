// Mixed precision: the autocast guard's state and nesting, kiln ops under it, the
// GradScaler's skip / back-off / growth / unscale and its saved state, and small
// bf16 and fp16 runs on CPU that train, and the warning of a bf16 run on a CPU that
// has no bf16 matrix instructions.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "nn/mlp.h"
#include "ops/cpu_bf16.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "support.h"
#include "train/amp.h"
#include "train/trainer.h"
#include "util/error.h"

using kiln::train::AutocastGuard;
using kiln::train::GradScaler;
using kiln::train::GradScalerOptions;

namespace {

struct AutocastState {
  bool enabled;
  at::ScalarType dtype;
  bool operator==(const AutocastState& o) const { return enabled == o.enabled && dtype == o.dtype; }
};
AutocastState cpu_state() {
  return {at::autocast::is_autocast_enabled(at::kCPU), at::autocast::get_autocast_dtype(at::kCPU)};
}

// autocast's nesting depth, read by incrementing and decrementing it once.
int nesting() {
  const int n = at::autocast::increment_nesting() - 1;
  at::autocast::decrement_nesting();
  return n;
}

// One parameter w (4) and the loss (w·x).sum(), so dloss/dw = x.
struct Toy {
  torch::Tensor w = torch::tensor({1.0f, -2.0f, 3.0f, 0.5f}).requires_grad_();
  torch::Tensor x = torch::tensor({0.25f, 1.0f, -0.5f, 2.0f});
  kiln::optim::AdamW opt{std::vector<torch::Tensor>{w}, kiln::optim::AdamWOptions(0.1)};
  torch::Tensor loss() const { return (w * x).sum(); }
  void backward(GradScaler& scaler) {
    opt.zero_grad();
    scaler.scale(loss()).backward();
  }
};

}  // namespace

TEST_CASE("AutocastGuard sets autocast for its scope, nests, and restores the previous state",
          "[amp]") {
  const AutocastState before = cpu_state();
  const int depth = nesting();
  const bool cuda_before = at::autocast::is_autocast_enabled(at::kCUDA);
  {
    AutocastGuard outer(at::kCPU, at::kBFloat16);
    REQUIRE(cpu_state() == AutocastState{true, at::kBFloat16});
    REQUIRE(nesting() == depth + 1);
    REQUIRE(at::autocast::is_autocast_enabled(at::kCUDA) == cuda_before);  // other device untouched
    {
      AutocastGuard off(at::kCPU, at::kBFloat16, false);
      REQUIRE(cpu_state() == AutocastState{false, at::kBFloat16});
      REQUIRE(nesting() == depth + 2);
      {
        AutocastGuard half(at::kCPU, at::kHalf);
        REQUIRE(cpu_state() == AutocastState{true, at::kHalf});
        REQUIRE(nesting() == depth + 3);
      }
      REQUIRE(cpu_state() == AutocastState{false, at::kBFloat16});
    }
    REQUIRE(cpu_state() == AutocastState{true, at::kBFloat16});
  }
  REQUIRE(cpu_state() == before);
  REQUIRE(nesting() == depth);

  // An exception leaving the scope restores the state too.
  try {
    AutocastGuard amp(at::kCPU, at::kBFloat16);
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  REQUIRE(cpu_state() == before);
  REQUIRE(nesting() == depth);
}

TEST_CASE("AutocastGuard keeps cast weights for its outermost scope and drops them after",
          "[amp]") {
  const auto w = torch::randn({3, 5}).requires_grad_();  // a leaf: autocast caches its cast
  const auto cast = [&] { return at::autocast::cached_cast(at::kBFloat16, w, at::kCPU); };
  torch::Tensor first;
  {
    AutocastGuard outer(at::kCPU, at::kBFloat16);
    first = cast();
    REQUIRE(first.scalar_type() == at::kBFloat16);
    REQUIRE(cast().is_same(first));
    { AutocastGuard inner(at::kCPU, at::kBFloat16); }
    REQUIRE(cast().is_same(first));  // an inner scope ending keeps the cache
  }
  AutocastGuard again(at::kCPU, at::kBFloat16);
  REQUIRE_FALSE(cast().is_same(first));  // the outermost one ending cleared it
}

TEST_CASE("AutocastGuard rejects a dtype autocast cannot run in", "[amp]") {
  const AutocastState before = cpu_state();
  REQUIRE_THROWS_WITH(AutocastGuard(at::kCPU, at::kDouble),
                      Catch::Contains("expected dtype float16 or bfloat16, got Double"));
  REQUIRE(cpu_state() == before);
  AutocastGuard off(at::kCPU, at::kDouble, false);  // a disabled guard takes any dtype
}

TEST_CASE("kiln::ops::linear under a CPU bfloat16 AutocastGuard returns bfloat16", "[amp]") {
  const auto x = torch::randn({8, 5});
  const auto w = torch::randn({3, 5}).requires_grad_();
  const auto b = torch::randn({3}).requires_grad_();
  torch::Tensor inside, disabled;
  {
    AutocastGuard amp(at::kCPU, at::kBFloat16);
    inside = kiln::ops::linear(x, w, b);
    AutocastGuard off(at::kCPU, at::kBFloat16, false);
    disabled = kiln::ops::linear(x, w, b);
  }
  const auto outside = kiln::ops::linear(x, w, b);
  REQUIRE(inside.scalar_type() == at::kBFloat16);
  REQUIRE(disabled.scalar_type() == at::kFloat);
  REQUIRE(outside.scalar_type() == at::kFloat);
  const auto tol = kiln::test::tolerance_for(at::kBFloat16);
  KILN_REQUIRE_CLOSE(inside.to(at::kFloat), outside.detach(), tol.rtol, 4 * tol.atol);
  // Backward reaches the float32 leaves in their own dtype.
  inside.sum().backward();
  REQUIRE(w.grad().scalar_type() == at::kFloat);
  REQUIRE(b.grad().scalar_type() == at::kFloat);
}

TEST_CASE("precision_plan maps fp32, bf16 and fp16 and names the valid ones for anything else",
          "[amp]") {
  const auto fp32 = kiln::train::precision_plan("fp32", at::kCPU);
  REQUIRE((!fp32.autocast && !fp32.loss_scaling && fp32.dtype == at::kFloat));
  const auto bf16 = kiln::train::precision_plan("bf16", at::kCUDA);
  REQUIRE((bf16.autocast && !bf16.loss_scaling && bf16.dtype == at::kBFloat16));
  const auto fp16 = kiln::train::precision_plan("fp16", at::kCPU);
  REQUIRE((fp16.autocast && fp16.loss_scaling && fp16.dtype == at::kHalf));
  REQUIRE_THROWS_AS(kiln::train::precision_plan("tf32", at::kCPU), kiln::InputError);
  REQUIRE_THROWS_WITH(kiln::train::precision_plan("tf32", at::kCPU),
                      "train.precision: expected one of fp32, bf16, fp16, got 'tf32'");
}

TEST_CASE("GradScaler: the scaled gradients are unscaled exactly, once per step", "[amp]") {
  Toy toy;
  GradScaler scaler;
  toy.backward(scaler);
  REQUIRE(torch::equal(toy.w.grad(), toy.x * 65536.0f));
  scaler.unscale_(toy.opt);
  REQUIRE(torch::equal(toy.w.grad(), toy.x));
  scaler.unscale_(toy.opt);  // idempotent until update()
  REQUIRE(torch::equal(toy.w.grad(), toy.x));
  REQUIRE(scaler.step(toy.opt));
  REQUIRE_THROWS_WITH(scaler.step(toy.opt), Catch::Contains("call update() between steps"));
  scaler.update();
  REQUIRE(scaler.scale() == 65536.0);
  REQUIRE(scaler.skipped_steps() == 0);
}

TEST_CASE("GradScaler: an inf or NaN gradient skips the step, keeps the parameters and halves "
          "the scale",
          "[amp]") {
  const float bad = GENERATE(std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::quiet_NaN());
  Toy toy;
  GradScaler scaler;
  toy.backward(scaler);
  toy.w.grad()[2] = bad;  // injected
  const auto w_before = toy.w.detach().clone();
  REQUIRE_FALSE(scaler.step(toy.opt));
  scaler.update();
  REQUIRE(torch::equal(toy.w.detach(), w_before));
  REQUIRE(toy.opt.state().empty());  // AdamW never ran: no moments were created
  REQUIRE(scaler.scale() == 32768.0);
  REQUIRE(scaler.skipped_steps() == 1);
  REQUIRE(scaler.state().growth_tracker == 0);

  // The next, finite step is applied at the halved scale.
  toy.backward(scaler);
  REQUIRE(torch::equal(toy.w.grad(), toy.x * 32768.0f));
  REQUIRE(scaler.step(toy.opt));
  scaler.update();
  REQUIRE_FALSE(torch::equal(toy.w.detach(), w_before));
  REQUIRE(scaler.scale() == 32768.0);
  REQUIRE(scaler.skipped_steps() == 1);
  REQUIRE(scaler.state().growth_tracker == 1);
}

TEST_CASE("GradScaler: the scale grows by growth_factor after growth_interval good steps",
          "[amp]") {
  Toy toy;
  GradScaler scaler(GradScalerOptions().init_scale(1024).growth_interval(3).growth_factor(4));
  const auto good_step = [&] {
    toy.backward(scaler);
    REQUIRE(scaler.step(toy.opt));
    scaler.update();
  };
  good_step();
  good_step();
  REQUIRE(scaler.scale() == 1024.0);
  good_step();
  REQUIRE(scaler.scale() == 4096.0);
  REQUIRE(scaler.state().growth_tracker == 0);
  // A skipped step restarts the count.
  good_step();
  good_step();
  toy.backward(scaler);
  toy.w.grad()[0] = std::numeric_limits<float>::infinity();
  REQUIRE_FALSE(scaler.step(toy.opt));
  scaler.update();
  REQUIRE(scaler.scale() == 2048.0);
  good_step();
  good_step();
  REQUIRE(scaler.scale() == 2048.0);
  good_step();
  REQUIRE(scaler.scale() == 8192.0);
}

TEST_CASE("GradScaler's state survives save and load, and a wrong archive is refused", "[amp]") {
  Toy toy;
  GradScaler scaler(GradScalerOptions().growth_interval(5));
  for (int i = 0; i < 3; ++i) {
    toy.backward(scaler);
    if (i == 0) toy.w.grad()[1] = std::numeric_limits<float>::quiet_NaN();
    scaler.step(toy.opt);
    scaler.update();
  }
  const auto saved = scaler.state();
  REQUIRE(saved.scale == 32768.0);
  REQUIRE(saved.growth_tracker == 2);
  REQUIRE(saved.skipped_steps == 1);

  std::stringstream bytes;
  {
    torch::serialize::OutputArchive out;
    scaler.save(out);
    out.save_to(bytes);
  }
  GradScaler restored(GradScalerOptions().growth_interval(5));
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  restored.load(in);
  const auto got = restored.state();
  REQUIRE(got.scale == saved.scale);
  REQUIRE(got.growth_tracker == saved.growth_tracker);
  REQUIRE(got.skipped_steps == saved.skipped_steps);

  // An optimizer's archive is not a scaler's.
  std::stringstream other;
  {
    torch::serialize::OutputArchive out;
    toy.opt.save(out);
    out.save_to(other);
  }
  torch::serialize::InputArchive wrong;
  wrong.load_from(other);
  REQUIRE_THROWS_WITH(restored.load(wrong),
                      Catch::Contains("expected a kiln::train::GradScaler state, got kiln::optim::AdamW"));
  REQUIRE(restored.state().scale == saved.scale);  // unchanged
  REQUIRE_THROWS_WITH(restored.load_state({-1.0, 0, 0}), Catch::Contains("scale: expected a finite value > 0"));
}

TEST_CASE("a disabled GradScaler passes the loss through and always steps", "[amp]") {
  Toy toy;
  GradScaler scaler(GradScalerOptions().enabled(false));
  const auto loss = toy.loss();
  REQUIRE(scaler.scale(loss).is_same(loss));
  loss.backward();
  toy.w.grad()[0] = std::numeric_limits<float>::infinity();
  REQUIRE(scaler.step(toy.opt));
  scaler.update();
  REQUIRE(scaler.scale() == 1.0);
  REQUIRE(scaler.skipped_steps() == 0);
}

namespace {

// Trains Mlp(16 → 32 → 4) for 60 full-batch steps on 512 points labelled by a random
// linear teacher, under `precision` on CPU; returns (first loss, mean of the last 5 losses, steps skipped).
std::tuple<double, double, int64_t> train_synthetic(const std::string& precision) {
  torch::manual_seed(7);
  const auto x = torch::randn({512, 16});
  const auto y = x.matmul(torch::randn({16, 4})).argmax(1);
  kiln::nn::Mlp model(kiln::nn::MlpOptions(16, {32}, 4));
  kiln::optim::AdamW opt(model->parameters(), kiln::optim::AdamWOptions(1e-2).weight_decay(0));
  const auto plan = kiln::train::precision_plan(precision, at::kCPU);
  GradScaler scaler(GradScalerOptions().enabled(plan.loss_scaling));
  std::vector<double> losses;
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    torch::Tensor loss;
    {
      AutocastGuard amp(at::kCPU, plan.dtype, plan.autocast);
      const auto logits = model->forward(x);
      if (step == 0) REQUIRE(logits.scalar_type() == (plan.autocast ? plan.dtype : at::kFloat));
      loss = kiln::ops::cross_entropy(logits, y);
    }
    scaler.scale(loss).backward();
    if (step == 0)
      for (const auto& p : model->parameters()) REQUIRE(p.grad().scalar_type() == at::kFloat);
    scaler.step(opt);
    scaler.update();
    losses.push_back(loss.item<double>());
  }
  double last = 0;
  for (size_t i = losses.size() - 5; i < losses.size(); ++i) last += losses[i] / 5;
  return {losses.front(), last, scaler.skipped_steps()};
}

}  // namespace

TEST_CASE("a bf16 autocast run on CPU trains a small Mlp (loss falls below 0.1x)", "[amp]") {
  const auto [first, last, skipped] = train_synthetic("bf16");
  INFO("first loss " << first << ", mean of the last 5 " << last);
  REQUIRE(last < 0.1 * first);
  REQUIRE(skipped == 0);
}

TEST_CASE("an fp16 run with loss scaling on CPU trains a small Mlp (loss falls below 0.1x)",
          "[amp]") {
  const auto [first, last, skipped] = train_synthetic("fp16");
  INFO("first loss " << first << ", mean of the last 5 " << last << ", skipped " << skipped);
  REQUIRE(last < 0.1 * first);
  REQUIRE(skipped == 0);
}

TEST_CASE("fp16: the loss is float32 and the first steps are taken, the scale unchanged",
          "[amp]") {
  // Before cross_entropy had an autocast rule its loss was float16 and the first
  // step of every fp16 run was skipped (the scale, 2^16, overflows float16 in backward).
  torch::manual_seed(3);
  const auto x = torch::randn({64, 16});
  const auto y = torch::randint(0, 4, {64}, at::kLong);
  kiln::nn::Mlp model(kiln::nn::MlpOptions(16, {32}, 4));
  kiln::optim::AdamW opt(model->parameters());
  GradScaler scaler;
  const auto before = model->parameters()[0].detach().clone();
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step + 1);
    opt.zero_grad();
    torch::Tensor loss;
    {
      AutocastGuard amp(at::kCPU, at::kHalf);
      loss = kiln::ops::cross_entropy(model->forward(x), y);
    }
    REQUIRE(loss.scalar_type() == at::kFloat);
    scaler.scale(loss).backward();
    REQUIRE(scaler.step(opt));
    scaler.update();
  }
  REQUIRE(scaler.skipped_steps() == 0);
  REQUIRE(scaler.scale() == 65536.0);
  REQUIRE_FALSE(torch::equal(model->parameters()[0].detach(), before));
}

TEST_CASE("CUDA: fp16 autocast and a GradScaler whose scale lives on the gradients' device",
          "[amp][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  const auto w = torch::randn({3, 5}, torch::kCUDA).requires_grad_();
  const auto x = torch::randn({8, 5}, torch::kCUDA);
  kiln::optim::AdamW opt(std::vector<torch::Tensor>{w});
  GradScaler scaler;
  torch::Tensor loss;
  {
    AutocastGuard amp(at::kCUDA, at::kHalf);
    const auto y = kiln::ops::linear(x, w, std::nullopt);
    REQUIRE(y.scalar_type() == at::kHalf);
    loss = y.to(at::kFloat).pow(2).mean();
  }
  const auto scaled = scaler.scale(loss);
  REQUIRE(scaled.is_cuda());
  scaled.backward();
  w.grad()[0][0] = std::numeric_limits<float>::infinity();
  const auto before = w.detach().clone();
  REQUIRE_FALSE(scaler.step(opt));
  scaler.update();
  REQUIRE(torch::equal(w.detach(), before));
  REQUIRE(scaler.scale() == 32768.0);
  REQUIRE(scaler.state().growth_tracker == 0);
}

TEST_CASE("cpu_bf16_matmul agrees with the kernel's CPU flags and vendor, and a bf16 CPU run warns where "
          "bf16 is no faster",
          "[amp][bf16]") {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, flags, vendor;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("vendor_id", 0) == 0) vendor = line;
    if (line.rfind("flags", 0) == 0) {
      flags = line + " ";
      break;
    }
  }
  if (flags.empty() || flags.find(" avx2 ") == std::string::npos)
    return (void)kiln::test::skip("not an x86-64 Linux with /proc/cpuinfo flags");
  const bool amx = flags.find(" amx_bf16 ") != std::string::npos;
  const bool listed = amx || flags.find(" avx512_bf16 ") != std::string::npos;
  const bool amd = vendor.find("AuthenticAMD") != std::string::npos;
  using Kind = kiln::ops::CpuBf16Matmul;
  const auto avx512_kind = amd ? Kind::kAvx512Bf16 : Kind::kAvx512Bf16OnePort;
  REQUIRE(kiln::ops::cpu_bf16_matmul() == (amx ? Kind::kMatrixUnits : listed ? avx512_kind : Kind::kEmulated));

  kiln::test::TempDir dir;
  kiln::train::RunSpec spec;
  spec.run_dir = dir / "run";
  spec.config_toml = "# test\n";
  spec.data.train_limit(200).test_limit(100);
  spec.model.mlp = kiln::nn::MlpOptions(784, {16}, 10);
  spec.train.epochs(1).batch_size(50).max_steps(1).precision("bf16");
  spec.checkpoint.every(0);
  kiln::train::TrainObserver quiet;
  kiln::train::train(spec, quiet);
  std::ifstream log(dir / "run/train.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  CHECK((text.find("without bf16 matrix instructions") != std::string::npos) == !listed);
  CHECK((text.find("AVX512-BF16 but no AMX-BF16") != std::string::npos) == (listed && !amx && !amd));
}
