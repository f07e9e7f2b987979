// How the training tests run `kiln train` (train()) and what they read back from a
// run directory: its JSON-lines files (metrics.jsonl, memory.jsonl, the set-aside
// *.superseded.jsonl) and a checkpoint's weights. Apart from support.h so that only these tests include nlohmann/json.
#pragma once
#include <ATen/ATen.h>

#include <fstream>
#include <stdexcept>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/checkpoint.h"
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

/// The weights of RUN_DIR's newest checkpoint. Example: auto w = final_weights(dir / "straight");
inline kiln::safetensors::NamedTensors final_weights(const std::string& run_dir) {
  const auto checkpoint = kiln::train::latest_checkpoint(run_dir);
  if (!checkpoint) throw std::runtime_error(run_dir + ": no checkpoint");
  return checkpoint_weights(*checkpoint);
}

/// Where the newest checkpoints of two runs differ bit for bit: the first tensor
/// whose name, shape or any value differs ("" when every tensor is equal).
/// Example: REQUIRE(kiln::test::final_weights_differ(dir / "straight", dir / "resumed") == "");
inline std::string final_weights_differ(const std::string& run_a, const std::string& run_b) {
  const auto a = final_weights(run_a), b = final_weights(run_b);
  if (a.size() != b.size())
    return std::to_string(a.size()) + " tensors against " + std::to_string(b.size());
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].first != b[i].first || !at::equal(a[i].second, b[i].second)) return a[i].first;
  return "";
}

/// RUN_DIR's last "split":"test" line of metrics.jsonl (null when it has none).
inline nlohmann::json last_test_line(const std::string& run_dir) {
  nlohmann::json last;
  for (const auto& l : read_metrics(run_dir))
    if (l["split"] == "test") last = l;
  return last;
}

}  // namespace kiln::test
