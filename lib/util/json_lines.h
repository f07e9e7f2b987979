// Appends JSON objects, one per line, to a file (metrics.jsonl): the format every
// plotting tool and `jq` read.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace kiln {

/// Each line goes to the file in one write(2) as it is written; a line the file
/// system refuses (a full disk, a read-only file system) throws kiln::IoError naming
/// the file, as does a file that cannot be opened.
/// Example: JsonLines m("runs/x/metrics.jsonl"); m.write({{"step", 1}, {"loss", 0.5}});
class JsonLines {
 public:
  explicit JsonLines(const std::string& path);
  ~JsonLines();
  JsonLines(const JsonLines&) = delete;
  JsonLines& operator=(const JsonLines&) = delete;
  void write(const nlohmann::json& object);
  /// Text that is already whole lines, as it is.
  void append(std::string_view lines);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

/// Moves the lines of the JSON-lines file `path` whose "step" is greater than `step`
/// to the end of `side_path` (created if missing), keeping the others in order;
/// lines without a numeric step, or not JSON, stay — except a last line that is not
/// JSON (cut short by a crash), which is moved too. `path` is replaced whole
/// (written beside it, then renamed). Returns the number of lines moved.
/// Example: move_json_lines_after("runs/x/metrics.jsonl", 25, "runs/x/metrics.superseded.jsonl");
int64_t move_json_lines_after(const std::string& path, int64_t step, const std::string& side_path);

/// Whether the JSON-lines file `path` holds an object whose "split" is `split` and
/// whose "step" is `step`; false for a file that is missing or cannot be read.
/// Example: has_json_line("runs/x/metrics.jsonl", "test", 32)
bool has_json_line(const std::string& path, const std::string& split, int64_t step);

}  // namespace kiln
