// kiln::nn::Gpt: causal logits, GPT-2's initialisation, the key/value cache against
// the full forward pass, generation with and without the cache, checkpointed blocks;
// and a character GPT trained from config on text the test writes: bits per
// character, random windows, resume bit for bit, bf16/fp16, `kiln sample`.
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string_view>

#include "nn/factory.h"
#include "nn/generate.h"
#include "nn/gpt.h"
#include "ops/cpu_bf16.h"
#include "ops/cpu_capability.h"
#include "ops/linear/linear_onednn.h"
#include "run_files.h"
#include "sample_command.h"
#include "support.h"
#include "train/amp.h"
#include "train/checkpoint.h"
#include "util/error.h"

namespace {

kiln::nn::Gpt small_gpt(int64_t checkpoint_every = 0, const std::string& norm = "layernorm") {
  torch::manual_seed(0);
  return kiln::nn::Gpt(kiln::nn::GptOptions(11, 16).layers(3).width(24).heads(3).norm(norm).checkpoint_every(
      checkpoint_every));
}

}  // namespace

TEST_CASE("Gpt: logits (B, T, V), causal: a position never sees a later token", "[nn][gpt]") {
  for (const std::string norm : {"layernorm", "rmsnorm"}) {
    auto gpt = small_gpt(0, norm);
    gpt->eval();
    auto tokens = torch::randint(11, {2, 16}, torch::kLong);
    const auto a = gpt->forward(tokens);
    REQUIRE(a.sizes() == at::IntArrayRef({2, 16, 11}));
    tokens[0][9] = (tokens[0][9].item<int64_t>() + 1) % 11;  // change position 9 of row 0
    const auto b = gpt->forward(tokens);
    REQUIRE(at::equal(a.narrow(1, 0, 9), b.narrow(1, 0, 9)));  // positions before it: the same
    REQUIRE(!at::allclose(a[0].narrow(0, 9, 7), b[0].narrow(0, 9, 7)));
    REQUIRE(at::equal(a[1], b[1]));  // the other row
    REQUIRE_THROWS_WITH(gpt->forward(torch::zeros({1, 17}, torch::kLong)),
                        Catch::Contains("expected 1..16 positions (block_size), got 17"));
  }
}

TEST_CASE("Gpt: GPT-2 initialisation, tied head, parameter names", "[nn][gpt]") {
  torch::manual_seed(0);
  kiln::nn::Gpt gpt(kiln::nn::GptOptions(50, 64).layers(8).width(256).heads(4));
  const auto params = gpt->named_parameters();
  const double residual = 0.02 / std::sqrt(16.0);
  CHECK(params["blocks.0.attn.weight"].std().item<double>() == Approx(0.02).epsilon(0.03));
  CHECK(params["blocks.3.proj.weight"].std().item<double>() == Approx(residual).epsilon(0.03));
  CHECK(params["blocks.7.out.weight"].std().item<double>() == Approx(residual).epsilon(0.03));
  CHECK(params["token_embedding.weight"].std().item<double>() == Approx(0.02).epsilon(0.03));
  CHECK(at::equal(params["blocks.2.fc.bias"], torch::zeros({1024})));
  CHECK(at::equal(params["norm.weight"], torch::ones({256})));
  CHECK(!params.contains("head.weight"));  // tied: the token embedding is the head
  CHECK(gpt->head_parameters() == std::vector<std::string>{"token_embedding.weight"});
  kiln::nn::Gpt untied(kiln::nn::GptOptions(50, 64).layers(1).width(32).heads(4).tie_embeddings(false));
  CHECK(untied->head_parameters() == std::vector<std::string>{"head.weight"});
  CHECK_THROWS_WITH(kiln::nn::Gpt(kiln::nn::GptOptions(50, 64).width(30).heads(4)),
                    Catch::Contains("width: expected a positive multiple of heads (4), got 30"));
}

TEST_CASE("Gpt: the key/value cache gives the full forward pass's logits", "[nn][gpt]") {
  auto gpt = small_gpt();
  gpt->eval();
  const auto tokens = torch::randint(11, {2, 12}, torch::kLong);
  const auto full = gpt->forward(tokens);  // (2, 12, 11)
  kiln::nn::KvCache cache;
  auto last = gpt->decode(tokens.narrow(1, 0, 5), cache);  // a 5-token prefill
  REQUIRE(cache.length == 5);
  CHECK(kiln::test::all_close(last, full.select(1, 4), 1e-5, 1e-5).ok);
  for (int64_t t = 5; t < 12; ++t) {
    last = gpt->decode(tokens.narrow(1, t, 1), cache);
    INFO("position " << t);
    CHECK(kiln::test::all_close(last, full.select(1, t), 1e-5, 1e-5).ok);
  }
  REQUIRE_THROWS_WITH(gpt->decode(tokens.narrow(1, 0, 2), cache),
                      Catch::Contains("a filled cache takes one token a call, got 2"));
}

TEST_CASE("generate: the cache gives the same tokens at temperature 0, past block_size too", "[nn][gpt]") {
  auto gpt = small_gpt();
  const auto prompt = torch::tensor({3, 1, 4}, torch::kLong);
  using kiln::nn::GenerateOptions;
  const auto cached = kiln::nn::generate(*gpt, prompt, GenerateOptions().tokens(40).temperature(0));
  const auto plain = kiln::nn::generate(*gpt, prompt, GenerateOptions().tokens(40).temperature(0).cache(false));
  REQUIRE(cached.numel() == 40);  // the context (16) slides twice
  REQUIRE(at::equal(cached, plain));
  // Sampling: seeded, the same with or without the cache, and top-k 1 is greedy.
  const auto s1 = kiln::nn::generate(*gpt, prompt, GenerateOptions().tokens(30).seed(7));
  const auto s2 = kiln::nn::generate(*gpt, prompt, GenerateOptions().tokens(30).seed(7).cache(false));
  REQUIRE(at::equal(s1, s2));
  REQUIRE(!at::equal(s1, kiln::nn::generate(*gpt, prompt, GenerateOptions().tokens(30).seed(8))));
  REQUIRE(at::equal(kiln::nn::generate(*gpt, prompt, GenerateOptions().tokens(40).top_k(1)), cached));
  // A temperature so small that logits / T overflows float (or T itself underflows to 0
  // in float) is greedy too, not a NaN distribution that multinomial refuses.
  for (const double t : {1e-30, 1e-45, 1e-320}) {
    INFO("temperature " << t);
    REQUIRE(at::equal(kiln::nn::generate(*gpt, prompt, GenerateOptions().tokens(40).temperature(t).seed(3)), cached));
  }
  REQUIRE(gpt->is_training());  // generate puts the mode back
}

TEST_CASE("generate: on_token sees each token as it is chosen and can stop the generation", "[nn][gpt]") {
  using kiln::nn::GenerateOptions;
  auto gpt = small_gpt();
  const auto prompt = torch::tensor({3, 1, 4}, torch::kLong);
  const auto all = kiln::nn::generate(*gpt, prompt, GenerateOptions().tokens(25).seed(3));
  std::vector<int64_t> seen;
  const auto some = kiln::nn::generate(*gpt, prompt, GenerateOptions().tokens(25).seed(3).on_token([&](int64_t id) {
    seen.push_back(id);
    return seen.size() < 10;  // the tenth token is the last
  }));
  REQUIRE(seen.size() == 10);
  REQUIRE(some.numel() == 10);
  REQUIRE(at::equal(some, all.narrow(0, 0, 10)));  // the same tokens as the uncut run's first ten
  REQUIRE(at::equal(some, at::tensor(seen, at::kLong)));
}

TEST_CASE("Gpt in CPU bf16 autocast: its plain attention is causal and within bf16 rounding of float32",
          "[nn][gpt]") {
  auto gpt = small_gpt();
  auto tokens = torch::randint(11, {2, 16}, torch::kLong);
  const auto reference = gpt->forward(tokens);  // float32: ATen's fused attention
  reference.square().sum().backward();
  std::map<std::string, at::Tensor> grads;
  for (const auto& p : gpt->named_parameters()) grads[p.key()] = p.value().grad().clone();
  gpt->zero_grad();
  at::Tensor low, changed;
  {
    kiln::train::AutocastGuard amp(at::kCPU, at::kBFloat16, true);
    low = gpt->forward(tokens);
    low.to(at::kFloat).square().sum().backward();
    tokens[0][9] = (tokens[0][9].item<int64_t>() + 1) % 11;
    torch::NoGradGuard no_grad;
    changed = gpt->forward(tokens);
  }
  REQUIRE(kiln::test::all_close(low.to(at::kFloat), reference, 0.05, 0.02).ok);
  REQUIRE(at::equal(low.narrow(1, 0, 9), changed.narrow(1, 0, 9)));  // nothing sees a later token
  REQUIRE(!at::allclose(low[0].narrow(0, 9, 7), changed[0].narrow(0, 9, 7)));
  for (const auto& p : gpt->named_parameters()) {  // the same direction, to bf16's precision
    INFO(p.key());
    const auto a = p.value().grad().flatten().to(at::kDouble), b = grads[p.key()].flatten().to(at::kDouble);
    REQUIRE((a.dot(b) / (a.norm() * b.norm() + 1e-30)).item<double>() > 0.99);
  }
}

TEST_CASE("Gpt in CPU bf16 autocast: the attention matrix is never cast, forward or backward",
          "[nn][gpt]") {
  // The softmax runs on the bf16 scores (ATen computes it in float32 inside), so no
  // (B·heads, T, T) tensor goes through a dtype conversion: a float32 softmax would
  // cast the scores up and the weights down, and their gradients back, each step.
  static thread_local int64_t matrix_casts = 0;
  const auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        if (std::string_view(fn.name()) != "aten::_to_copy") return nullptr;
        const auto inputs = fn.inputs();
        if (!inputs.empty() && inputs[0].isTensor() &&
            inputs[0].toTensor().sizes() == at::IntArrayRef({2 * 3, 16, 16}))
          ++matrix_casts;
        return nullptr;
      }).needsInputs(true));
  auto gpt = small_gpt();  // 3 heads
  const auto tokens = torch::randint(11, {2, 16}, torch::kLong);
  matrix_casts = 0;
  {
    kiln::train::AutocastGuard amp(at::kCPU, at::kBFloat16, true);
    gpt->forward(tokens).to(at::kFloat).square().sum().backward();
  }
  at::removeCallback(handle);
  REQUIRE(matrix_casts == 0);
  for (const auto& p : gpt->parameters()) REQUIRE(p.grad().defined());  // the backward ran
}

TEST_CASE("Gpt in float32 on the CPU runs kiln's fused attention, dropout inside it", "[nn][gpt][dropout]") {
  // ATen's scaled_dot_product_attention would drop the weights with ATen's dropout, a
  // Bernoulli draw an element, and without dropout runs its slower flash kernel: each of
  // the 3 blocks calls kiln::causal_attention with p = 0.1 instead (kiln's AVX2 and
  // AVX-512 builds), or, in the base build, the composite whose (2·3, 16, 16) weights go
  // through kiln::dropout. Calls are recorded at the autograd kernel and again below
  // it: counted by the address of their input, once each.
  static thread_local std::set<const void*> fused, weights;
  static thread_local int64_t aten_dropouts = 0, sdpa = 0;
  const auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        const std::string_view name = fn.name();
        if (name == "aten::dropout" || name == "aten::native_dropout" || name == "aten::bernoulli_") ++aten_dropouts;
        if (name == "aten::scaled_dot_product_attention") ++sdpa;
        const auto inputs = fn.inputs();
        if (name == "kiln::causal_attention" && inputs.size() >= 3 && inputs[2].isDouble() &&
            inputs[2].toDouble() == 0.1)
          fused.insert(inputs[0].toTensor().const_data_ptr());
        if (name == "kiln::dropout" && !inputs.empty() && inputs[0].isTensor() &&
            inputs[0].toTensor().sizes() == at::IntArrayRef({2 * 3, 16, 16}))
          weights.insert(inputs[0].toTensor().const_data_ptr());
        return nullptr;
      }).needsInputs(true));
  torch::manual_seed(0);
  kiln::nn::Gpt gpt(kiln::nn::GptOptions(11, 16).layers(3).width(24).heads(3).dropout(0.1));
  const auto tokens = torch::randint(11, {2, 16}, torch::kLong);
  fused.clear();
  weights.clear();
  aten_dropouts = sdpa = 0;
  const auto logits = gpt->forward(tokens);  // keeps the graph, and with it the inputs
  at::removeCallback(handle);
  const bool kernel = kiln::ops::cpu_capability() >= kiln::ops::CpuCapability::kAvx2;
  CHECK(fused.size() == (kernel ? 3u : 0u));
  CHECK(weights.size() == (kernel ? 0u : 3u));
  CHECK(aten_dropouts == 0);
  CHECK(sdpa == 0);
}

TEST_CASE("Gpt under CPU bf16 autocast: the fused attention where bf16 products are slow", "[nn][gpt][linear]") {
  // kiln::causal_attention where the CPU has AVX512-BF16 without AMX, and where it has
  // neither and bf16 products run as float32 ones (its float loops beat the composite's
  // emulated bf16 batched GEMMs); else the composite (baddbmm, softmax, bmm).
  using Kind = kiln::ops::CpuBf16Matmul;
  const char* env = std::getenv("KILN_CPU_ATTENTION");
  const bool fused_expected =
      (env == nullptr || std::string_view(env) != "composite") &&
      ((kiln::ops::cpu_has_avx512_bf16() && kiln::ops::cpu_bf16_matmul() != Kind::kMatrixUnits) ||
       (kiln::ops::cpu_bf16_matmul() == Kind::kEmulated && kiln::ops::linear_reduced_in_float32()));
  static thread_local std::set<const void*> fused;
  static thread_local int64_t baddbmm = 0;
  const auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        const std::string_view name = fn.name();
        if (name == "aten::baddbmm") ++baddbmm;
        const auto inputs = fn.inputs();
        if (name == "kiln::causal_attention" && !inputs.empty() && inputs[0].isTensor())
          fused.insert(inputs[0].toTensor().const_data_ptr());
        return nullptr;
      }).needsInputs(true));
  auto gpt = small_gpt(0);
  const auto tokens = torch::randint(11, {2, 16}, torch::kLong);
  fused.clear();
  baddbmm = 0;
  at::Tensor logits;
  {
    kiln::train::AutocastGuard amp(at::kCPU, at::kBFloat16);
    logits = gpt->forward(tokens);
  }
  at::removeCallback(handle);
  const auto blocks = static_cast<int64_t>(gpt->options.layers());
  CHECK(static_cast<int64_t>(fused.size()) == (fused_expected ? blocks : 0));
  CHECK((baddbmm >= blocks) == !fused_expected);  // recorded at each dispatch level: once or more a block
  logits.to(at::kFloat).square().sum().backward();
  for (const auto& p : gpt->parameters()) REQUIRE(p.grad().defined());
}

TEST_CASE("Gpt: checkpointed blocks give the same outputs and gradients", "[nn][gpt]") {
  // float32, and CPU bf16 autocast (where the CPU has AVX512-BF16: the fused attention,
  // which drops the weights itself and draws the mask again in backward).
  for (const bool bf16 : {false, true}) {
    INFO("bf16 autocast " << bf16);
    auto plain = small_gpt(0);
    auto checkpointed = small_gpt(2);
    plain->options.dropout(0.1);
    checkpointed->options.dropout(0.1);
    const auto tokens = torch::randint(11, {2, 16}, torch::kLong);
    at::autocast::set_autocast_enabled(at::kCPU, bf16);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    torch::manual_seed(5);
    const auto a = plain->forward(tokens);
    a.to(at::kFloat).square().sum().backward();
    torch::manual_seed(5);
    const auto b = checkpointed->forward(tokens);
    b.to(at::kFloat).square().sum().backward();
    at::autocast::set_autocast_enabled(at::kCPU, false);
    at::autocast::clear_cache();
    REQUIRE(at::equal(a, b));  // the same dropout masks: the recomputation replays the generator
    const auto pa = plain->named_parameters(), pb = checkpointed->named_parameters();
    for (const auto& p : pa) {
      INFO(p.key());
      REQUIRE(kiln::test::all_close(pb[p.key()].grad(), p.value().grad(), 1e-5, 1e-6).ok);
    }
  }
}

namespace {

// A small corpus with structure to learn: repeated sentences.
std::string write_corpus(const kiln::test::TempDir& dir) {
  const std::string path = dir / "corpus";
  std::filesystem::create_directories(path);
  std::ofstream text(path + "/a.txt");
  for (int i = 0; i < 300; ++i) text << "the cat sat on the mat. " << (i % 7 == 0 ? "a dog ran.\n" : "");
  std::ofstream(path + "/skip.dat") << "\xff\xfe not text";  // data.exclude skips it
  return path;
}

std::vector<std::string> gpt_overrides(const std::string& corpus) {
  return {"data.format=text",   "data.train=" + corpus, "data.exclude=[\"*.dat\"]",
          "data.block_size=16", "data.stride=16",       "data.windows=random",
          "data.test_fraction=0.1", "model.name=gpt",   "model.blocks=2",
          "model.embed=32",     "model.heads=4",        "optim.lr=3e-3",
          "train.batch_size=16", "train.epochs=3",      "train.threads=1",
          "train.eval_batch_size=8"};
}

}  // namespace

TEST_CASE("Gpt trains from config on text: bits per character fall, random windows resume bit for bit",
          "[train][gpt]") {
  kiln::test::TempDir dir;
  const auto corpus = write_corpus(dir);
  const auto common = gpt_overrides(corpus);
  REQUIRE(kiln::test::train("configs/tiny.toml", dir / "straight", common) == 0);
  const auto last = kiln::test::last_test_line(dir / "straight");
  INFO(last.dump());
  // 14 distinct characters: a uniform guess is log2(14) = 3.8 bits; the text repeats.
  REQUIRE(last["bits_per_char"].get<double>() < 2.0);
  REQUIRE(last["bits_per_char"].get<double>() == Approx(last["loss"].get<double>() / std::log(2.0)));
  bool has_tokens_per_s = false;
  for (const auto& l : kiln::test::read_metrics(dir / "straight"))
    has_tokens_per_s = has_tokens_per_s || l.contains("tokens_per_s");
  REQUIRE(has_tokens_per_s);

  auto stopped = common;
  stopped.push_back("train.max_steps=5");  // mid-epoch (the corpus gives 8 batches an epoch)
  REQUIRE(kiln::test::train("configs/tiny.toml", dir / "resumed", stopped) == 0);
  REQUIRE(kiln::test::train("", "", {"train.max_steps=0"}, dir / "resumed") == 0);
  REQUIRE(kiln::test::final_weights_differ(dir / "straight", dir / "resumed") == "");

  // kiln sample continues a prompt with the run's own vocabulary.
  kiln::app::SampleCommand cmd;
  cmd.checkpoint = dir / "straight";
  cmd.prompt = "the cat ";
  cmd.tokens = 20;
  cmd.temperature = 0;
  REQUIRE(kiln::app::run_sample(cmd) == 0);
  cmd.prompt = "the cat?";  // '?' is not in the corpus
  REQUIRE_THAT(kiln::test::input_error_of([&] { kiln::app::run_sample(cmd); }),
               Catch::Contains("--prompt") && Catch::Contains("U+003F"));
}

TEST_CASE("Gpt trains in bf16 and fp16 autocast and with checkpointed blocks", "[train][gpt]") {
  kiln::test::TempDir dir;
  const auto corpus = write_corpus(dir);
  for (const std::string extra : {"train.precision=bf16", "train.precision=fp16", "model.checkpoint_every=1"}) {
    auto o = gpt_overrides(corpus);
    o.push_back(extra);
    o.push_back("train.epochs=1");
    const auto run = dir / ("run_" + std::to_string(std::hash<std::string>{}(extra)));
    INFO(extra);
    REQUIRE(kiln::test::train("configs/tiny.toml", run, o) == 0);
    const auto last = kiln::test::last_test_line(run);
    REQUIRE(std::isfinite(last["bits_per_char"].get<double>()));
    REQUIRE(last["bits_per_char"].get<double>() < std::log2(14.0));
  }
}

TEST_CASE("a GPT needs text; kiln sample needs a GPT", "[train][gpt]") {
  kiln::test::TempDir dir;
  REQUIRE_THAT(kiln::test::input_error_of([&] {
                 kiln::test::train("configs/tiny.toml", dir / "img", {"model.name=gpt", "train.max_steps=1"});
               }),
               Catch::Contains("model.name = \"gpt\": expected text (data.format = \"text\")"));
  REQUIRE(kiln::test::train("configs/tiny.toml", dir / "mlp", {"train.max_steps=2"}) == 0);
  kiln::app::SampleCommand cmd;
  cmd.checkpoint = dir / "mlp";
  REQUIRE_THAT(kiln::test::input_error_of([&] { kiln::app::run_sample(cmd); }),
               Catch::Contains("model.name: expected a language model trained on text (gpt), found \"mlp\""));
  cmd.checkpoint = dir / "none";
  REQUIRE_THAT(kiln::test::input_error_of([&] { kiln::app::run_sample(cmd); }),
               Catch::Contains("expected a checkpoint directory"));
}
