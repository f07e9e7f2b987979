// Appends JSON objects, one per line, to a file (metrics.jsonl): the format every
// plotting tool and `jq` read.
#pragma once
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

namespace kiln {

/// Example: JsonLines m("runs/x/metrics.jsonl"); m.write({{"step", 1}, {"loss", 0.5}});
class JsonLines {
 public:
  explicit JsonLines(const std::string& path);
  void write(const nlohmann::json& object);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace kiln
