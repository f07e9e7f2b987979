// Every model's own config in configs/ (the file a user starts from) trains end to
// end on tiny data: parsed as written, sized down only where the test must be quick,
// stopped after its first step, resumed to the end of its epochs, evaluated; and a
// few steps in bf16 and fp16 autocast.
#include <filesystem>
#include <fstream>

#include "run_files.h"
#include "support.h"
#include "train/checkpoint.h"

namespace {

struct ConfigCase {
  std::string config;
  std::vector<std::string> overrides;
};

}  // namespace

TEST_CASE("each model's config trains from configs/ on tiny data, stopped and resumed",
          "[train][configs]") {
  kiln::test::TempDir dir;
  const std::string corpus = dir / "corpus.txt";
  {
    std::ofstream text(corpus);
    for (int i = 0; i < 200; ++i) text << "the cat sat on the mat. a dog ran.\n";
  }
  const std::vector<std::string> images = {"data.train_limit=256", "data.test_limit=100",
                                           "train.epochs=2", "train.threads=1"};
  const auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), images.begin(), images.end());
    return extra;
  };
  const std::vector<ConfigCase> cases = {
      {"configs/fashion_mlp.toml", with({})},
      {"configs/deep_mlp_checkpointed.toml", with({"model.depth=6", "model.width=32"})},
      {"configs/dynamic_mlp.toml", with({"model.width=32"})},
      {"configs/fashion_convnet.toml", with({"model.channels=[4, 8, 8, 8]", "model.head=16"})},
      {"configs/gpt_char.toml",
       {"data.train=" + corpus, "data.block_size=16", "data.stride=16", "model.blocks=2",
        "model.embed=16", "model.heads=2", "train.batch_size=16", "train.epochs=2", "train.threads=1"}},
  };
  for (const auto& c : cases) {
    INFO(c.config);
    const std::string run = dir / std::filesystem::path(c.config).stem().string();
    auto first = c.overrides;
    first.push_back("train.max_steps=1");
    REQUIRE(kiln::test::train(c.config, run, first) == 0);
    REQUIRE(kiln::test::train("", "", {"train.max_steps=0"}, run) == 0);  // --resume RUN
    const auto checkpoint = kiln::train::latest_checkpoint(run);
    REQUIRE(checkpoint);
    const auto last = kiln::test::last_test_line(run);
    REQUIRE(last.contains("accuracy"));
    REQUIRE(last["epoch"] == 2);  // both epochs ran, the second after the resume
    REQUIRE(std::isfinite(last["loss"].get<double>()));
    // Both autocast precisions on the CPU, whatever the config says.
    for (const std::string precision : {"bf16", "fp16"}) {
      INFO(precision);
      auto o = c.overrides;
      o.push_back("train.precision=" + precision);
      o.push_back("train.max_steps=2");
      const std::string amp_run = run + "_" + precision;
      REQUIRE(kiln::test::train(c.config, amp_run, o) == 0);
      REQUIRE(kiln::train::latest_checkpoint(amp_run));
    }
  }
}
