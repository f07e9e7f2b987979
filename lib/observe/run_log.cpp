// read_run(): each JSON line checked and turned into (step, value) points per key;
// then per key sorted by step with the later of equal steps kept, since a resumed
// run may have written a step twice.
#include "observe/run_log.h"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "util/error.h"
#include "util/files.h"

namespace kiln::observe {
namespace fs = std::filesystem;
namespace {

// The start of a line for a message, on one line and not too long.
std::string snippet(const std::string& line) {
  constexpr size_t kMax = 60;
  std::string s = line.size() > kMax ? line.substr(0, kMax) + "…" : line;
  std::replace(s.begin(), s.end(), '\r', ' ');
  return "'" + s + "'";
}

// `line` with the bare words NaN, Infinity, +Infinity and -Infinity outside strings
// (what Python's json module writes for non-finite floats) replaced by null.
std::string nulls_for_non_finite(const std::string& line) {
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < line.size()) out += line[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const char* word : {"-Infinity", "+Infinity", "Infinity", "NaN"}) {
      if (line.compare(i, std::strlen(word), word) == 0) {
        out += "null";
        i += std::strlen(word) - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

struct Line {
  int64_t number;  // 1-based
  nlohmann::json object;
  int64_t step;
};

// Calls `take` with each JSON object of a JSON-lines file, its line number and its
// whole "step", one at a time: a long run's lines are never all held at once.
void read_lines(const std::string& path, std::vector<std::string>& warnings,
                const std::function<void(const Line&)>& take) {
  const std::string text = files::read(path);
  size_t at = 0;
  for (int64_t number = 1; at < text.size(); ++number) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string line = text.substr(at, end - at);
    const bool last_unterminated = end == text.size();
    at = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) j = nlohmann::json::parse(nulls_for_non_finite(line), nullptr, false);
    if (j.is_discarded()) {
      if (last_unterminated) {
        warnings.push_back(c10::str(path, ":", number, ": skipped the last line: it is cut short "
                                    "(no newline, not whole JSON; a run still writing it?): ",
                                    snippet(line)));
        continue;
      }
      std::string why;
      try {
        [[maybe_unused]] const auto j2 = nlohmann::json::parse(nulls_for_non_finite(line));
      } catch (const nlohmann::json::exception& e) {
        why = e.what();
        if (const auto close = why.find("] "); why.rfind("[json.exception", 0) == 0 && close != std::string::npos)
          why = why.substr(close + 2);
      }
      throw InputError(c10::str(path, ":", number, ": expected a JSON object, found ", snippet(line),
                                " (", why, ")"));
    }
    if (!j.is_object())
      throw InputError(c10::str(path, ":", number, ": expected a JSON object, found a JSON ",
                                j.type_name(), " ", snippet(line)));
    const auto step = j.find("step");
    if (step == j.end())
      throw InputError(c10::str(path, ":", number, ": expected a \"step\" (a whole number >= 0), found none"));
    const double s = step->is_number() ? step->get<double>() : -1.0;
    if (!(s >= 0) || s != std::floor(s) || s > 9e15)
      throw InputError(c10::str(path, ":", number, ": expected \"step\" to be a whole number >= 0, found ",
                                step->dump()));
    take({number, std::move(j), static_cast<int64_t>(s)});
  }
}

// Collects the values of one split line by line, then orders them by step (finish()).
class SeriesBuilder {
 public:
  // Numbers at the top level; with `nested`, numbers one object down as "outer.inner".
  // A null is a non-finite value (nlohmann writes NaN and ±inf as null) unless
  // `null_is_absent` (memory.jsonl's "not measured").
  void add(const Line& line, bool nested, bool null_is_absent) {
    ++out_.lines;
    if (line.step <= last_step_) ++out_.repeated_steps;
    last_step_ = line.step;
    for (const auto& [key, value] : line.object.items()) {
      if (key == "step") continue;
      if (nested && value.is_object()) {
        for (const auto& [inner, v] : value.items()) put(key + "." + inner, v, line, null_is_absent);
      } else {
        put(key, value, line, null_is_absent);
      }
    }
  }

  StepSeries finish() {
    for (auto& [key, entries] : entries_) {
      // By step; of equal steps the later line (stable sort keeps file order), once.
      std::stable_sort(entries.begin(), entries.end(),
                       [](const Entry& a, const Entry& b) { return a.step < b.step; });
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i + 1 < entries.size() && entries[i + 1].step == entries[i].step) continue;
        if (std::isfinite(entries[i].value))
          out_.values[key].push_back({static_cast<double>(entries[i].step), entries[i].value});
        else
          out_.non_finite[key].push_back(entries[i].step);
      }
    }
    return std::move(out_);
  }

 private:
  struct Entry {
    int64_t step;
    double value;
  };
  void put(const std::string& key, const nlohmann::json& v, const Line& line, bool null_is_absent) {
    if (v.is_number()) entries_[key].push_back({line.step, v.get<double>()});
    else if (v.is_null() && !null_is_absent) entries_[key].push_back({line.step, NAN});
  }

  std::map<std::string, std::vector<Entry>> entries_;
  StepSeries out_;
  int64_t last_step_ = -1;
};

// What `dir` is, when it is not a run: for the message.
std::string not_a_run(const fs::path& dir) {
  std::vector<std::string> runs;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && fs::exists(e.path() / "metrics.jsonl")) runs.push_back(e.path().string());
  std::sort(runs.begin(), runs.end());
  if (runs.empty()) return "a directory without one";
  const size_t shown = std::min<size_t>(runs.size(), 4);
  std::vector<std::string> some(runs.begin(), runs.begin() + static_cast<std::ptrdiff_t>(shown));
  return c10::str("a directory of runs (", c10::Join(", ", some), runs.size() > shown ? ", …" : "",
                  "): give those");
}

}  // namespace

RunLog read_run(const std::string& dir) {
  RunLog run;
  run.dir = dir;
  if (dir.empty()) throw InputError("RUN_DIR: expected a run directory (with metrics.jsonl), found an empty name");
  const fs::path path = fs::path(dir).lexically_normal();
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (!fs::exists(status))
    throw InputError(c10::str(dir, ": expected a run directory (with metrics.jsonl), found nothing there"));
  if (!fs::is_directory(status))
    throw InputError(c10::str(dir, ": expected a run directory (with metrics.jsonl), found a file"));
  const fs::path metrics = path / "metrics.jsonl";
  if (!fs::exists(metrics))
    throw InputError(c10::str(dir, ": expected a run directory (with metrics.jsonl, as kiln train "
                              "writes), found ", not_a_run(path)));
  fs::path absolute = fs::absolute(path).lexically_normal();  // "runs/a/" and "." have a name too
  if (absolute.filename().empty()) absolute = absolute.parent_path();
  run.name = absolute.filename().empty() ? dir : absolute.filename().string();

  SeriesBuilder train, test;
  int64_t last_test_step = -1;
  read_lines(metrics.string(), run.warnings, [&](const Line& line) {
    const auto split = line.object.find("split");
    if (split == line.object.end() || !split->is_string())
      throw InputError(c10::str(metrics.string(), ":", line.number,
                                ": expected \"split\": \"train\" or \"test\", found ",
                                split == line.object.end() ? std::string("none") : split->dump()));
    const auto name = split->get<std::string>();
    if (name == "train") {
      train.add(line, false, false);
    } else if (name == "test") {
      test.add(line, false, false);
      if (line.step >= last_test_step) run.last_test = line.object, last_test_step = line.step;
    } else {
      ++run.other_splits[name];
    }
  });
  run.train = train.finish();
  run.test = test.finish();

  const fs::path memory = path / "memory.jsonl";
  if (fs::exists(memory)) {
    run.has_memory_file = true;
    SeriesBuilder mem;
    read_lines(memory.string(), run.warnings, [&](const Line& line) { mem.add(line, true, true); });
    run.memory = mem.finish();
  }
  const fs::path config = path / "config.toml";
  if (fs::exists(config)) run.config_toml = files::read(config.string());
  return run;
}

}  // namespace kiln::observe
