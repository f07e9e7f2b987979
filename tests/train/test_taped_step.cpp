// The trainer's taped step (train::taped_step): runs of the default MLP (cross-entropy,
// micro-batches; gelu and sigmoid; bf16 autocast, fp16 with its loss scaling) and CSV
// regressions (mean squared error, fp32 and bf16) train to the same weights and log the
// same losses as the same runs through autograd (KILN_TAPED_STEP=off, in a child
// process: the switch is read once a process), whose traces show autograd's engine
// where the taped ones show none; and which runs keep autograd.
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "run_files.h"
#include "support.h"
#include "train/run_parts.h"

namespace {

// The cpu_op names of RUN/profile/trace.json.
std::set<std::string> traced_ops(const std::string& run) {
  std::ifstream in(run + "/profile/trace.json");
  const auto trace = nlohmann::json::parse(in);
  std::set<std::string> ops;
  for (const auto& e : trace["traceEvents"])
    if (e.value("cat", "") == "cpu_op") ops.insert(e.value("name", ""));
  return ops;
}

bool has_prefix(const std::set<std::string>& names, const std::string& prefix) {
  for (const auto& n : names)
    if (n.rfind(prefix, 0) == 0) return true;
  return false;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// `kiln train CONFIG --set OVERRIDES` taped in this process (with a profiled window),
// and through autograd in a child; both runs' final weights, logged losses and
// gradient norms and test metrics must be equal, and only the child's trace may hold
// autograd's engine.
void require_taped_equals_autograd(const std::string& config, std::vector<std::string> overrides) {
  overrides.push_back("profile.steps=\"3:4\"");
  overrides.push_back("profile.memory=false");
  kiln::test::TempDir dir;
  const std::string taped = dir / "taped", autograd = dir / "autograd";
  REQUIRE(kiln::test::train(config, taped, overrides) == 0);
  std::string sets;
  for (const auto& o : overrides) sets += o + "\n";
  ::setenv("KILN_TAPED_STEP", "off", 1);
  ::setenv("KILN_TEST_TAPED_CONFIG", config.c_str(), 1);
  ::setenv("KILN_TEST_TAPED_RUN", autograd.c_str(), 1);
  ::setenv("KILN_TEST_TAPED_SETS", sets.c_str(), 1);
  std::string output;
  const int status = kiln::test::run_self({"taped step: autograd's run child"}, output);
  for (const char* name : {"KILN_TAPED_STEP", "KILN_TEST_TAPED_CONFIG", "KILN_TEST_TAPED_RUN", "KILN_TEST_TAPED_SETS"})
    ::unsetenv(name);
  INFO(output);
  REQUIRE(status == 0);

  REQUIRE(kiln::test::final_weights_differ(taped, autograd) == "");
  const auto a = kiln::test::read_metrics(taped), b = kiln::test::read_metrics(autograd);
  REQUIRE(a.size() == b.size());
  int64_t compared = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("metrics line " << i << ": " << a[i].dump());
    for (const char* key : {"loss", "grad_norm", "accuracy", "rmse"}) {
      if (!a[i].contains(key)) continue;
      REQUIRE(a[i][key] == b[i][key]);
      ++compared;
    }
  }
  REQUIRE(compared > 5);

  const auto ops_taped = traced_ops(taped), ops_autograd = traced_ops(autograd);
  REQUIRE(ops_taped.count("kiln::linear_backward"));
  REQUIRE_FALSE(has_prefix(ops_taped, "autograd::engine"));
  REQUIRE(has_prefix(ops_autograd, "autograd::engine"));
}

}  // namespace

// Run by require_taped_equals_autograd in a child process with KILN_TAPED_STEP=off.
TEST_CASE("taped step: autograd's run child", "[.][taped]") {
  const char* config = std::getenv("KILN_TEST_TAPED_CONFIG");
  const char* run = std::getenv("KILN_TEST_TAPED_RUN");
  const char* sets = std::getenv("KILN_TEST_TAPED_SETS");
  REQUIRE((config && run && sets));
  REQUIRE(kiln::test::train(config, run, split_lines(sets)) == 0);
}

TEST_CASE("a taped run trains to autograd's weights and losses bit for bit, without autograd's engine",
          "[train][taped]") {
  // The tiny config's first 640 examples on one thread, with each section's settings.
  const auto tiny = [](std::vector<std::string> extra) {
    std::vector<std::string> sets = {"data.train_limit=640", "data.test_limit=200", "train.threads=1"};
    sets.insert(sets.end(), extra.begin(), extra.end());
    require_taped_equals_autograd("configs/tiny.toml", sets);
  };
  SECTION("the default MLP, two micro-batches a step") { tiny({"train.accumulate=2"}); }
  SECTION("gelu with dropout") { tiny({"model.activation=\"gelu\"", "model.dropout=0.2"}); }
  SECTION("sigmoid (its beta and gradient clip) with dropout") {
    tiny({"model.activation=\"sigmoid\"", "model.sigmoid_beta=2.0", "model.sigmoid_grad_clip=0.3",
          "model.dropout=0.1"});
  }
  SECTION("bf16 autocast, two micro-batches a step") { tiny({"train.precision=\"bf16\"", "train.accumulate=2"}); }
  SECTION("fp16 autocast and its loss scaling, gelu") {
    tiny({"train.precision=\"fp16\"", "model.activation=\"gelu\"", "train.accumulate=2"});
  }
  for (const char* precision : {"fp32", "bf16"}) {
    DYNAMIC_SECTION("a CSV regression (mean squared error) with two hidden layers, " << precision) {
      kiln::test::TempDir data;
      const auto csv = data / "table.csv";
      std::ofstream out(csv);
      out << "a,b,c,y\n";
      for (int i = 0; i < 200; ++i) {
        const double a = (i % 17) / 4.0, b = (i % 5) - 2.0, c = (i * 7 % 11) / 3.0;
        out << a << ',' << b << ',' << c << ',' << 3.0 * a - 2.0 * b + 0.5 * a * c + 0.1 * (i % 3) << '\n';
      }
      out.close();
      require_taped_equals_autograd("configs/penguins_mass.toml",
                                    {"data.train=" + csv, "data.label=\"y\"", "data.features=[]",
                                     "model.hidden=[16, 8]", "train.epochs=3", "train.threads=1",
                                     std::string("train.precision=\"") + precision + "\""});
    }
  }
}

TEST_CASE("taped_step: every MLP; autograd for other models", "[train][taped]") {
  using kiln::train::taped_step;
  kiln::nn::Mlp relu(kiln::nn::MlpOptions(4, {3}, 2));
  kiln::nn::Mlp gelu(kiln::nn::MlpOptions(4, {3}, 2).activation("gelu").dropout(0.1));
  kiln::nn::Mlp sigmoid(kiln::nn::MlpOptions(4, {3}, 2).activation("sigmoid"));
  torch::nn::Linear other(4, 2);
  REQUIRE(taped_step(*relu) == relu.get());
  REQUIRE(taped_step(*gelu) == gelu.get());
  REQUIRE(taped_step(*sigmoid) == sigmoid.get());
  REQUIRE(taped_step(*other) == nullptr);
}
