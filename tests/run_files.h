// What the training tests read back from a run directory: its JSON-lines files
// (metrics.jsonl, memory.jsonl, the set-aside *.superseded.jsonl) and a checkpoint's
// weights. Apart from support.h so that only these tests include nlohmann/json.
#pragma once
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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

/// The named tensors of CHECKPOINT/model.safetensors, in the file's order.
inline kiln::safetensors::NamedTensors checkpoint_weights(const std::string& checkpoint) {
  return kiln::safetensors::load_file(checkpoint + "/model.safetensors").tensors;
}

}  // namespace kiln::test
