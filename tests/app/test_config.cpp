// The config layer: defaults, files, overrides, and the errors for an unknown
// key, a wrong type, a missing file and a bad override; unset [optim] keys that
// stay the optimizer's own defaults from the file to the built optimizer, in the
// help text and in the resolved TOML.
#include <torch/torch.h>

#include <fstream>

#include "config.h"
#include "data/fashion_mnist.h"
#include "nn/factory.h"
#include "optim/factory.h"
#include "optim/lion.h"
#include "optim/muon.h"
#include "optim/sgd.h"
#include "support.h"

using kiln::app::apply_override;
using kiln::app::Config;
using kiln::app::ConfigError;
using kiln::app::parse_config;

TEST_CASE("a config file sets values over the defaults", "[app][config]") {
  const auto c = parse_config("[train]\nepochs = 3\n[model]\nhidden = [32, 16]\n[optim]\nlr = 2\n",
                              "x.toml");
  REQUIRE(c.train.epochs == 3);
  REQUIRE(c.model.hidden == std::vector<int64_t>{32, 16});
  REQUIRE(c.optim.lr == 2.0);  // an integer is fine where a float is expected
  REQUIRE(c.train.batch_size == Config{}.train.batch_size);
  REQUIRE(c.origin.at("train.epochs") == "x.toml:2:10");
}

TEST_CASE("overrides replace values, in TOML syntax or as bare strings", "[app][config]") {
  auto c = parse_config("", "x.toml");
  apply_override(c, "train.epochs=7");
  apply_override(c, "model.hidden=[128,64,32]");
  apply_override(c, "run.name=experiment_2");
  apply_override(c, "data.root=\"/tmp/a b\"");
  apply_override(c, "optim.lr=3e-4");
  REQUIRE(c.train.epochs == 7);
  REQUIRE(c.model.hidden == std::vector<int64_t>{128, 64, 32});
  REQUIRE(c.run.name == "experiment_2");
  REQUIRE(c.data.root == "/tmp/a b");
  REQUIRE(c.optim.lr == 3e-4);
  kiln::app::validate(c);
}

TEST_CASE("overrides take numbers as a shell user writes them and lists without brackets",
          "[app][config]") {
  auto c = parse_config("", "x.toml");
  apply_override(c, "optim.lr=.002");
  REQUIRE(c.optim.lr == 0.002);
  apply_override(c, "optim.weight_decay=5.");
  REQUIRE(c.optim.weight_decay == 5.0);
  apply_override(c, "optim.lr=+.5e-3");
  REQUIRE(c.optim.lr == 0.5e-3);
  apply_override(c, "model.hidden=256,128");
  REQUIRE(c.model.hidden == std::vector<int64_t>{256, 128});
  apply_override(c, "model.hidden=64");
  REQUIRE(c.model.hidden == std::vector<int64_t>{64});
  apply_override(c, "data.exclude=*.dat,*.u8");
  REQUIRE(c.data.exclude == std::vector<std::string>{"*.dat", "*.u8"});
  apply_override(c, "data.exclude=[\"a\", \"b\"]");  // TOML's own form still
  REQUIRE(c.data.exclude == std::vector<std::string>{"a", "b"});
  // Text stays text where a key holds text, dots and all.
  apply_override(c, "run.name=v1.5");
  REQUIRE(c.run.name == "v1.5");
  // What is neither: the key's message, and why the value was no TOML value.
  REQUIRE_THROWS_WITH(apply_override(c, "optim.lr=1.2.3"),
                      Catch::StartsWith("--set optim.lr=1.2.3: [optim] lr: expected a number") &&
                          Catch::Contains("(not a TOML value: "));
  REQUIRE_THROWS_WITH(apply_override(c, "train.seed=99999999999999999999"),
                      Catch::StartsWith("--set train.seed=99999999999999999999: [train] seed: expected") &&
                          Catch::Contains("(not a TOML value: "));
  REQUIRE_THROWS_WITH(apply_override(c, "model.hidden=256,x"),
                      Catch::StartsWith("--set model.hidden=256,x: [model] hidden: expected an array of integers"));
  REQUIRE_THROWS_WITH(apply_override(c, "optim.lr=+-.5"), Catch::Contains("expected a number"));
}

TEST_CASE("a bare-word override must be text a config.toml can hold", "[app][config]") {
  // The fuzzer's find: a non-UTF-8 word was taken, and the run's resolved config.toml
  // then did not read back on resume.
  auto c = parse_config("", "x.toml");
  REQUIRE_THROWS_MATCHES(apply_override(c, "run.name=x\xb0" "csv"), ConfigError,
                         Catch::Message("--set run.name=x\xb0" "csv: expected a value of UTF-8 text "
                                        "without control characters, found 'x\\xB0csv'"));
  REQUIRE_THROWS_WITH(apply_override(c, "run.name=a\x1b[31m"),
                      Catch::Contains("found 'a\\x1B[31m'"));
  apply_override(c, "run.name=caf\xc3\xa9");  // UTF-8 is fine
  REQUIRE(c.run.name == "caf\xc3\xa9");
  REQUIRE(parse_config(kiln::app::to_toml(c), "config.toml").run.name == c.run.name);
}

TEST_CASE("an unknown key names the file, the key and the valid keys", "[app][config]") {
  REQUIRE_THROWS_MATCHES(
      parse_config("[train]\nepoch = 3\n", "cfg.toml"), ConfigError,
      Catch::Message("cfg.toml:2:9: unknown key 'epoch' in [train]; valid keys: epochs, "
                     "batch_size, accumulate, eval_batch_size, eval_every, log_every, max_steps, "
                     "seed, threads, device, precision, prefetch, data_on_device, flush_denormals"));
  REQUIRE_THROWS_WITH(parse_config("[trian]\nepochs = 3\n", "cfg.toml"),
                      Catch::Contains("unknown section [trian]; valid sections: run, data"));
  auto c = parse_config("", "cfg.toml");
  REQUIRE_THROWS_WITH(apply_override(c, "train.epoch=3"),
                      Catch::StartsWith("--set train.epoch=3: unknown key 'epoch' in [train]"));
}

TEST_CASE("a wrong type says what was expected and what was found", "[app][config]") {
  REQUIRE_THROWS_WITH(parse_config("[train]\nepochs = \"ten\"\n", "cfg.toml"),
                      Catch::Equals("cfg.toml:2:10: [train] epochs: expected an integer, found "
                                    "string \"ten\""));
  REQUIRE_THROWS_WITH(parse_config("[model]\nhidden = [1, \"x\"]\n", "cfg.toml"),
                      Catch::Contains("[model] hidden: expected an array of integers"));
  REQUIRE_THROWS_WITH(parse_config("train = 3\n", "cfg.toml"),
                      Catch::Contains("[train]: expected a table, found integer 3"));
  auto c = parse_config("", "cfg.toml");
  REQUIRE_THROWS_WITH(apply_override(c, "train.epochs=ten"),
                      Catch::Equals("--set train.epochs=ten: [train] epochs: expected an integer, "
                                    "found string \"ten\""));
  REQUIRE_THROWS_WITH(apply_override(c, "train.epochs"),
                      Catch::Contains("expected section.key=value, found no '='"));
}

TEST_CASE("a TOML syntax error and a missing file are config errors", "[app][config]") {
  REQUIRE_THROWS_WITH(parse_config("[train\n", "bad.toml"),
                      Catch::StartsWith("bad.toml:1:") && Catch::Contains("TOML syntax error") &&
                          Catch::EndsWith("(found the end of the line)"));
  // What was found: the rest of the line from the error's column, cut at 40 bytes on a
  // character (toml++ counts columns in characters: "é" is one).
  REQUIRE_THROWS_WITH(parse_config("[train]\nepochs = = 3\n", "bad.toml"),
                      Catch::StartsWith("bad.toml:2:10: TOML syntax error: ") &&
                          Catch::EndsWith("(found \"= 3\")"));
  REQUIRE_THROWS_WITH(parse_config("[run]\nname = \"é\" \"" + std::string(50, 'x') + "\n", "bad.toml"),
                      Catch::EndsWith("(found \"\"" + std::string(39, 'x') + "…\")"));
  // A NUL byte is quoted escaped, and the quote closes (it had ended the message's C string).
  REQUIRE_THROWS_WITH(parse_config(std::string("[train]\nepochs = 1\0 2\n", 22), "nul.toml"),
                      Catch::StartsWith("nul.toml:2:11: TOML syntax error: ") &&
                          Catch::EndsWith("(found \"\\x00 2\")"));
  REQUIRE_THROWS_WITH(kiln::app::load_config("/nonexistent/x.toml"),
                      Catch::Contains("/nonexistent/x.toml: cannot read the config file"));
}

TEST_CASE("a config file that names no run names it after itself", "[app][config]") {
  kiln::test::TempDir dir;
  const auto write = [&](const std::string& name, const std::string& text) {
    const auto path = dir / name;
    std::ofstream(path) << text;
    return path;
  };
  CHECK(kiln::app::load_config(write("wide_mlp.toml", "[model]\nhidden = [1024]\n")).run.name == "wide_mlp");
  CHECK(kiln::app::load_config(write("other.toml", "[run]\ndir = \"out\"\n")).run.name == "other");
  CHECK(kiln::app::load_config(write("named.toml", "[run]\nname = \"exp3\"\n")).run.name == "exp3");
  CHECK(kiln::app::load_config(write("v1.2.toml", "")).run.name == "v1.2");
  // A name given as "" is still refused by validate, not replaced.
  CHECK(kiln::app::load_config(write("empty.toml", "[run]\nname = \"\"\n")).run.name.empty());
}

TEST_CASE("validation names the key, its origin, and the valid range", "[app][config]") {
  auto c = parse_config("[train]\nbatch_size = 0\n", "cfg.toml");
  REQUIRE_THROWS_WITH(kiln::app::validate(c),
                      Catch::Equals("cfg.toml:2:14: train.batch_size: expected an integer > 0, "
                                    "found 0"));
  c = parse_config("", "cfg.toml");
  apply_override(c, "optim.name=sdg");
  REQUIRE_THROWS_WITH(kiln::app::validate(c),
                      Catch::Equals("--set: optim.name: expected one of: \"adamw\", \"sgd\", "
                                    "\"lion\", \"muon\", found \"sdg\""));
  c = parse_config("[train]\nbatch_size = 100\naccumulate = 3\n", "cfg.toml");
  REQUIRE_THROWS_WITH(kiln::app::validate(c),
                      Catch::Equals("cfg.toml:3:14: train.accumulate: expected a divisor of "
                                    "train.batch_size (100), found 3"));
  c = parse_config("[train]\nprecision = \"fp8\"\n", "cfg.toml");
  REQUIRE_THROWS_WITH(kiln::app::validate(c),
                      Catch::Equals("cfg.toml:2:13: train.precision: expected one of: \"fp32\", "
                                    "\"bf16\", \"fp16\", found \"fp8\""));
  // "." and ".." would put the run into run.dir itself or its parent, over their files.
  for (const std::string name : {".", "..", "", "a/b"}) {
    c = parse_config("", "cfg.toml");
    apply_override(c, "run.name=\"" + name + "\"");
    REQUIRE_THROWS_WITH(kiln::app::validate(c),
                        Catch::Equals("--set: run.name: expected a non-empty name without '/', other than "
                                      "\".\" and \"..\", found \"" + name + "\""));
  }
  c = parse_config("", "cfg.toml");
  apply_override(c, "run.name=...");  // a name like any other
  REQUIRE_NOTHROW(kiln::app::validate(c));
  c = parse_config("[optim]\nlr = nan\n", "cfg.toml");
  REQUIRE_THROWS_WITH(kiln::app::validate(c),
                      Catch::Equals("cfg.toml:2:6: optim.lr: expected a number > 0, found nan"));
}

TEST_CASE("a boolean key takes true or false only", "[app][config]") {
  auto c = parse_config("[memory]\nhistory = true\n[optim]\nnesterov = false\n", "cfg.toml");
  REQUIRE(c.memory.history);
  REQUIRE(c.optim.nesterov == false);
  REQUIRE_THROWS_WITH(parse_config("[memory]\nhistory = 1\n", "cfg.toml"),
                      Catch::Equals("cfg.toml:2:11: [memory] history: expected true or false, "
                                    "found integer 1"));
  apply_override(c, "memory.history=false");
  REQUIRE_FALSE(c.memory.history);
}

TEST_CASE("the resolved TOML reads back to the same config", "[app][config]") {
  auto c = parse_config("", "x.toml");
  apply_override(c, "optim.lr=0.1");
  apply_override(c, "model.hidden=[3]");
  apply_override(c, "run.name=\"quote\\\"d\"");
  apply_override(c, "optim.nesterov=false");
  apply_override(c, "checkpoint.best=\"\"");
  const auto back = parse_config(kiln::app::to_toml(c), "resolved.toml");
  REQUIRE(kiln::app::to_toml(back) == kiln::app::to_toml(c));
  REQUIRE(back.optim.lr == 0.1);
  REQUIRE(back.run.name == "quote\"d");
  REQUIRE(back.optim.nesterov == false);
  REQUIRE(back.checkpoint.best.empty());
}

TEST_CASE("the shipped configs parse and validate", "[app][config]") {
  for (const char* name :
       {"configs/fashion_mlp.toml", "configs/tiny.toml", "configs/deep_mlp_checkpointed.toml"}) {
    INFO(name);
    kiln::app::validate(kiln::app::load_config(name));
  }
}

namespace {

// The optimizer a config builds, over one matrix and one vector.
std::unique_ptr<torch::optim::Optimizer> optimizer_of(const Config& c) {
  torch::OrderedDict<std::string, torch::Tensor> params;
  params.insert("w", torch::zeros({4, 3}, torch::requires_grad()));
  params.insert("b", torch::zeros({4}, torch::requires_grad()));
  return kiln::optim::make_optimizer(c.optim, params);
}

template <class Options>
const Options& options_of(const torch::optim::Optimizer& opt, size_t group = 0) {
  return static_cast<const Options&>(opt.param_groups().at(group).options());
}

// The line of `kiln train --help` for `key`.
std::string help_line(const std::string& key) {
  const auto text = kiln::app::describe_keys();
  const auto at = text.find("  " + key + " ");
  REQUIRE(at != std::string::npos);
  return text.substr(at, text.find('\n', at) - at);
}

}  // namespace

TEST_CASE("an unset optimizer key is the optimizer's own default, not the config's",
          "[app][config]") {
  auto lion = parse_config("[optim]\nname = \"lion\"\n", "x.toml");
  REQUIRE_FALSE(lion.optim.beta2.has_value());
  kiln::app::validate(lion);
  REQUIRE(options_of<kiln::optim::LionOptions>(*optimizer_of(lion)).beta2() == 0.99);
  REQUIRE(options_of<kiln::optim::LionOptions>(*optimizer_of(lion)).lr() ==
          kiln::optim::LionOptions().lr());

  const auto sgd = parse_config("[optim]\nname = \"sgd\"\nmomentum = 0.9\n", "x.toml");
  kiln::app::validate(sgd);
  const auto sgd_optimizer = optimizer_of(sgd);  // options_of's reference lives as long as it
  const auto& s = options_of<kiln::optim::SGDOptions>(*sgd_optimizer);
  REQUIRE_FALSE(s.nesterov());  // torch's default
  REQUIRE(s.momentum() == 0.9);  // a set key wins

  const auto muon = parse_config("[optim]\nname = \"muon\"\n", "x.toml");
  kiln::app::validate(muon);
  const auto opt = optimizer_of(muon);
  REQUIRE(options_of<kiln::optim::MuonOptions>(*opt, 0).momentum() == 0.95);
  REQUIRE(options_of<kiln::optim::MuonOptions>(*opt, 0).nesterov());
  REQUIRE(options_of<kiln::optim::MuonOptions>(*opt, 1).lr() ==
          kiln::optim::muon_adamw_group_defaults().lr());

  apply_override(lion, "optim.beta2=0.95");
  REQUIRE(options_of<kiln::optim::LionOptions>(*optimizer_of(lion)).beta2() == 0.95);
}

TEST_CASE("kiln train --help prints each optimizer's own default of an unset key",
          "[app][config]") {
  REQUIRE_THAT(help_line("optim.beta2"),
               Catch::EndsWith("(default: adamw 0.999, lion 0.99, muon 0.999)"));
  REQUIRE_THAT(help_line("optim.momentum"), Catch::EndsWith("(default: sgd 0.0, muon 0.95)"));
  REQUIRE_THAT(help_line("optim.nesterov"), Catch::EndsWith("(default: sgd false, muon true)"));
  REQUIRE_THAT(help_line("optim.lr"),
               Catch::EndsWith("(default: adamw 0.001, sgd 0.01, lion 1e-04, muon 0.02)"));
  REQUIRE_THAT(help_line("optim.adamw_lr"), Catch::EndsWith("(default: muon 3e-04)"));
  REQUIRE_THAT(help_line("train.epochs"), Catch::EndsWith("(default 10)"));
}

TEST_CASE("the resolved TOML comments an unset key with the value that applies; it reads back "
          "unset",
          "[app][config]") {
  auto c = parse_config("[optim]\nname = \"lion\"\nbeta1 = 0.8\n", "x.toml");
  const auto text = kiln::app::to_toml(c);
  INFO(text);
  REQUIRE_THAT(text, Catch::Contains("\nbeta1 = 0.8  # "));
  REQUIRE_THAT(text, Catch::Contains("\n# beta2 = 0.99  # ") &&
                         Catch::Contains("second-moment decay (unset: lion's default)\n"));
  REQUIRE_THAT(text, Catch::Contains("\n# momentum unset  # sgd, muon: momentum\n"));
  const auto back = parse_config(text, "resolved.toml");
  REQUIRE(back.optim.beta1 == 0.8);
  REQUIRE_FALSE(back.optim.beta2.has_value());
  REQUIRE(kiln::app::to_toml(back) == text);
}

TEST_CASE("validation asks the optimizer about combinations only it knows", "[app][config]") {
  auto c = parse_config("[optim]\nname = \"sgd\"\nnesterov = true\n", "cfg.toml");
  REQUIRE_THROWS_AS(kiln::app::validate(c), ConfigError);
  REQUIRE_THROWS_WITH(kiln::app::validate(c),
                      Catch::Contains("SGD: nesterov: expected momentum > 0"));
  apply_override(c, "optim.momentum=0.9");
  kiln::app::validate(c);
  // schedule.min_lr is checked against the lr that applies: muon's own 0.02.
  c = parse_config("[optim]\nname = \"muon\"\n[schedule]\nmin_lr = 0.01\n", "cfg.toml");
  kiln::app::validate(c);
  apply_override(c, "schedule.min_lr=0.03");
  REQUIRE_THROWS_WITH(kiln::app::validate(c),
                      Catch::Equals("--set: schedule.min_lr: expected a number in [0, optim.lr] "
                                    "(0.02), found 0.03"));
}

TEST_CASE("data.root's default is the data reader's", "[app][config]") {
  REQUIRE(Config{}.data.root == kiln::data::kDefaultFashionMnistRoot);
}

TEST_CASE("[data] keys: string arrays, names and ranges are checked", "[app][config]") {
  auto c = parse_config("[data]\nfeatures = [\"a\", \"b c\"]\ncategorical = []\nlabel = \"y\"\n",
                        "cfg.toml");
  REQUIRE(c.data.features == std::vector<std::string>{"a", "b c"});
  REQUIRE(kiln::app::to_toml(c).find("features = [ 'a', 'b c' ]") != std::string::npos);
  REQUIRE_THROWS_WITH(parse_config("[data]\nfeatures = [1, 2]\n", "cfg.toml"),
                      Catch::Contains("[data] features: expected an array of strings, found array"));
  apply_override(c, "data.missing=skip");
  REQUIRE_THROWS_WITH(kiln::app::validate(c), Catch::Contains("data.missing: expected one of: \"error\", "
                                                   "\"drop\", \"mean\", found \"skip\""));
  c = parse_config("", "cfg.toml");
  apply_override(c, "data.test_fraction=1");
  REQUIRE_THROWS_WITH(kiln::app::validate(c), Catch::Contains("data.test_fraction: expected a fraction in (0, 1), found 1.0"));
  c = parse_config("", "cfg.toml");
  apply_override(c, "data.format=parquet");
  REQUIRE_THROWS_WITH(kiln::app::validate(c), Catch::Contains("data.format: expected one of: \"auto\", \"idx\", "
                                                   "\"csv\", \"npy\", \"text\", found \"parquet\""));
  c = parse_config("", "cfg.toml");
  apply_override(c, "checkpoint.best=test_r2");
  REQUIRE_NOTHROW(kiln::app::validate(c));
}

TEST_CASE("the model's activation and depth keys are checked, naming key, expected and found",
          "[app][config]") {
  const auto error_of = [](const std::string& text) {
    try {
      kiln::app::validate(parse_config(text, "m.toml"));
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_of("[model]\nactivation = \"tanh\"\n") ==
        "m.toml:2:14: model.activation: expected one of: \"relu\", \"gelu\", \"sigmoid\", found \"tanh\"");
  CHECK(error_of("[model]\nsigmoid_beta = 0\n") ==
        "m.toml:2:16: model.sigmoid_beta: expected a finite number > 0, found 0.0");
  CHECK(error_of("[model]\nsigmoid_beta = inf\n") ==
        "m.toml:2:16: model.sigmoid_beta: expected a finite number > 0, found inf");
  CHECK(error_of("[model]\nsigmoid_beta = nan\n") ==
        "m.toml:2:16: model.sigmoid_beta: expected a finite number > 0, found nan");
  CHECK(error_of("[model]\nsigmoid_grad_clip = -0.5\n") ==
        "m.toml:2:21: model.sigmoid_grad_clip: expected a finite number >= 0 (0 = no clamp), found -0.5");
  CHECK(error_of("[model]\ndepth_sampling = \"random\"\n") ==
        "m.toml:2:18: model.depth_sampling: expected one of: \"fixed\", \"uniform\", found \"random\"");
  CHECK(error_of("[model]\ndepth = 4\nmin_depth = 5\n") ==
        "m.toml:3:13: model.min_depth: expected an integer <= model.depth (4), found 5");
  CHECK(error_of("[model]\nmin_depth = -1\n") ==
        "m.toml:2:13: model.min_depth: expected an integer >= 0, found -1");
  CHECK(error_of("[model]\nname = \"dynamic_mlp\"\nactivation = \"sigmoid\"\nsigmoid_beta = 2\n"
                 "sigmoid_grad_clip = 0.5\ndepth_sampling = \"uniform\"\nmin_depth = 2\nresidual = false\n") ==
        "no error");
}

TEST_CASE("the model keys' defaults are the models' own", "[app][config]") {
  const kiln::app::Config::Model c;
  const kiln::nn::ActivationOptions activation;
  REQUIRE(c.activation == activation.name());
  REQUIRE(c.sigmoid_beta == activation.sigmoid_beta());
  REQUIRE(c.sigmoid_grad_clip == activation.sigmoid_grad_clip());
  const kiln::nn::DynamicMlpOptions dynamic(1, 1);
  REQUIRE(c.min_depth == dynamic.min_depth());
  REQUIRE(c.depth_sampling == dynamic.depth_sampling());
  REQUIRE(c.residual == dynamic.residual());
  const kiln::nn::DeepMlpOptions deep(1, 1);
  REQUIRE(c.depth == deep.layers());
  REQUIRE(c.width == deep.width());
}
