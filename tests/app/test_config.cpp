// The config layer: defaults, files, overrides, and the errors for an unknown
// key, a wrong type, a missing file and a bad override.
#include <fstream>

#include "config.h"
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

TEST_CASE("an unknown key names the file, the key and the valid keys", "[app][config]") {
  REQUIRE_THROWS_MATCHES(
      parse_config("[train]\nepoch = 3\n", "cfg.toml"), ConfigError,
      Catch::Message("cfg.toml:2:9: unknown key 'epoch' in [train]; valid keys: epochs, "
                     "batch_size, accumulate, eval_batch_size, eval_every, log_every, max_steps, "
                     "seed, threads, device, precision"));
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
                      Catch::StartsWith("bad.toml:1:") && Catch::Contains("TOML syntax error"));
  REQUIRE_THROWS_WITH(kiln::app::load_config("/nonexistent/x.toml"),
                      Catch::Contains("/nonexistent/x.toml: cannot read the config file"));
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
  c = parse_config("[optim]\nlr = nan\n", "cfg.toml");
  REQUIRE_THROWS_WITH(kiln::app::validate(c),
                      Catch::Equals("cfg.toml:2:6: optim.lr: expected a number > 0, found nan"));
}

TEST_CASE("a boolean key takes true or false only", "[app][config]") {
  auto c = parse_config("[memory]\nhistory = true\n[optim]\nnesterov = false\n", "cfg.toml");
  REQUIRE(c.memory.history);
  REQUIRE_FALSE(c.optim.nesterov);
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
  REQUIRE_FALSE(back.optim.nesterov);
  REQUIRE(back.checkpoint.best.empty());
}

TEST_CASE("the shipped configs parse and validate", "[app][config]") {
  for (const char* name :
       {"configs/fashion_mlp.toml", "configs/tiny.toml", "configs/deep_mlp_checkpointed.toml"}) {
    INFO(name);
    kiln::app::validate(kiln::app::load_config(name));
  }
}
