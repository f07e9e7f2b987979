// How the training tests run `kiln train` (train()) and what they read back from a
// run directory: its JSON-lines files (metrics.jsonl, memory.jsonl, the set-aside
// *.superseded.jsonl) and a checkpoint's weights. Apart from support.h so that only these tests include nlohmann/json.
#pragma once
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train_command.h"
#include "util/safetensors.h"

namespace kiln::test {

/// One parsed object per line of `path` (none when the file is missing).
inline std::vector<nlohmann::json> read_json_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

/// RUN/metrics.jsonl, parsed. Example: for (const auto& l : read_metrics(run)) …
inline std::vector<nlohmann::json> read_metrics(const std::string& run_dir) {
  return read_json_lines(run_dir + "/metrics.jsonl");
}

/// `kiln train CONFIG --run-dir RUN_DIR --set …` through the app's own code, or with
/// `resume` non-empty `kiln train --resume RESUME --set …`; returns the exit code.
/// Example: REQUIRE(kiln::test::train("configs/tiny.toml", dir / "run", {"train.epochs=1"}) == 0);
inline int train(const std::string& config, const std::string& run_dir,
                 std::vector<std::string> overrides, const std::string& resume = "") {
  kiln::app::TrainCommand cmd;
  if (resume.empty()) {
    cmd.config_path = config;
    cmd.run_dir = run_dir;
  } else {
    cmd.resume_dir = resume;
  }
  cmd.overrides = std::move(overrides);
  return kiln::app::run_train(cmd);
}

/// The named tensors of CHECKPOINT/model.safetensors, in the file's order.
inline kiln::safetensors::NamedTensors checkpoint_weights(const std::string& checkpoint) {
  return kiln::safetensors::load_file(checkpoint + "/model.safetensors").tensors;
}

}  // namespace kiln::test
