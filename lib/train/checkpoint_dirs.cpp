// The checkpoints of a run as a set of directories: listing, the latest and the
// best, retention, and what `--resume` names.
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <regex>
#include <set>

#include "train/checkpoint.h"
#include "train/checkpoint_layout.h"
#include "util/error.h"
#include "util/files.h"
#include "util/json_lines.h"

namespace kiln::train {
namespace fs = std::filesystem;

namespace layout {

std::string step_dir_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%09lld", static_cast<long long>(step));
  return name;
}

std::optional<int64_t> step_of(const std::string& dir_name) {
  static const std::regex kStepDir(R"(step_(\d{1,18}))");
  std::smatch m;
  if (!std::regex_match(dir_name, m, kStepDir)) return std::nullopt;
  return std::stoll(m[1]);
}

nlohmann::json read_manifest(const fs::path& checkpoint_dir) {
  const std::string path = (checkpoint_dir / kManifest).string();
  if (!fs::exists(path))
    throw InputError(c10::str(path, ": missing: expected every complete checkpoint to have its "
                              "manifest (an interrupted save, or not a kiln checkpoint?)"));
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(files::read(path));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(c10::str(path, ": truncated or corrupted: expected JSON (", e.what(), ")"));
  }
  if (!m.is_object() || !m.contains("format") || m["format"] != kFormat)
    throw InputError(c10::str(path, ": format: expected \"", kFormat, "\", found ",
                              m.is_object() ? (m.contains("format") ? m["format"].dump() : "nothing")
                                            : c10::str("a JSON ", m.type_name())));
  const auto field = [&](const char* key, bool ok, const char* expected) {
    if (!ok)
      throw InputError(c10::str(path, ": ", key, ": expected ", expected, ", found ",
                                m.contains(key) ? m[key].dump() : "nothing"));
  };
  field("version", m.value("version", nlohmann::json()) == kVersion, "1");
  // An integer that int64 holds: 2^63 parses as an unsigned one and would read back negative.
  field("step",
        m.contains("step") && m["step"].is_number_integer() &&
            (!m["step"].is_number_unsigned() ||
             m["step"].get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())),
        "an integer of at most 2^63 - 1");
  field("metrics", m.contains("metrics") && m["metrics"].is_object(), "an object");
  field("parts", m.contains("parts") && m["parts"].is_array(), "an array of names");
  for (const auto& p : m["parts"]) field("parts", p.is_string(), "an array of names");
  field("files", m.contains("files") && m["files"].is_object(), "an object");
  for (const auto& [file, r] : m["files"].items()) {
    // A plain name in the checkpoint directory: a forged "../x" would be read from elsewhere.
    if (file.empty() || file.find('/') != std::string::npos || file[0] == '.')
      throw InputError(c10::str(path, ": files: expected names of files in the checkpoint directory, "
                                "found '", file, "'"));
    if (!(r.is_object() && r.contains("bytes") && r["bytes"].is_number_unsigned() &&
          r.contains("crc32") && r["crc32"].is_number_unsigned()))
      throw InputError(c10::str(path, ": files: ", file, ": expected {\"bytes\": N, \"crc32\": C} "
                                "with integers N, C >= 0, found ", r.dump()));
  }
  return m;
}

void remove_checkpoint_dir(const fs::path& dir) {
  const fs::path trash = dir.parent_path() / (std::string(kTrashPrefix) + dir.filename().string());
  files::remove_tree(trash.string());
  fs::rename(dir, trash);
  files::remove_tree(trash.string());
}

void remove_leftovers(const fs::path& checkpoints_root) {
  for (const auto& entry : fs::directory_iterator(checkpoints_root)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(kTmpPrefix) || name.starts_with(kTrashPrefix)) files::remove_tree(entry.path().string());
  }
}

}  // namespace layout

std::vector<CheckpointInfo> list_checkpoints(const std::string& run_dir) {
  const fs::path root = fs::path(run_dir) / layout::kCheckpoints;
  std::vector<CheckpointInfo> out;
  if (!fs::is_directory(root)) return out;
  for (const auto& entry : fs::directory_iterator(root)) {
    const auto step = layout::step_of(entry.path().filename().string());
    if (!step || !entry.is_directory() || !fs::exists(entry.path() / layout::kManifest)) continue;
    CheckpointInfo info{entry.path().string(), *step, {}};
    try {  // a damaged manifest still marks a complete checkpoint; load() reports it
      const auto m = layout::read_manifest(entry.path());
      for (const auto& [name, v] : m.at("metrics").items())
        if (v.is_number()) info.metrics[name] = v.get<double>();
    } catch (const InputError&) {
    }
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

std::optional<std::string> latest_checkpoint(const std::string& run_dir) {
  const auto all = list_checkpoints(run_dir);
  if (all.empty()) return std::nullopt;
  return all.back().dir;
}

namespace {


// The newest checkpoint of `dir` if it is a run directory.
std::optional<std::string> latest_of_run(const fs::path& dir) {
  if (!fs::is_directory(dir / layout::kCheckpoints)) return std::nullopt;
  return latest_checkpoint(dir.string());
}

}  // namespace

std::optional<CheckpointInfo> best_checkpoint(const std::vector<CheckpointInfo>& checkpoints,
                                              const std::string& metric, MetricMode mode) {
  std::optional<CheckpointInfo> best;
  double best_value = 0.0;
  for (const auto& c : checkpoints) {  // by step: a tie keeps the earlier
    const auto it = c.metrics.find(metric);
    if (it == c.metrics.end() || !std::isfinite(it->second)) continue;
    const bool better = mode == MetricMode::kMax ? it->second > best_value : it->second < best_value;
    if (!best || better) best = c, best_value = it->second;
  }
  return best;
}

std::optional<std::string> best_checkpoint(const std::string& run_dir, const std::string& metric,
                                           MetricMode mode) {
  const auto best = best_checkpoint(list_checkpoints(run_dir), metric, mode);
  return best ? std::optional<std::string>(best->dir) : std::nullopt;
}

void layout::apply_retention(const std::string& run_dir, const std::string& just_saved,
                     const CheckpointOptions& options) {
  if (options.keep_last() <= 0) return;
  const auto all = list_checkpoints(run_dir);
  std::set<std::string> keep{just_saved};
  for (size_t i = all.size() - std::min<size_t>(all.size(), options.keep_last()); i < all.size(); ++i)
    keep.insert(all[i].dir);
  if (!options.best_metric().empty())
    if (const auto best = best_checkpoint(all, options.best_metric(), options.best_mode()))
      keep.insert(best->dir);
  for (const auto& c : all)
    if (!keep.count(c.dir)) layout::remove_checkpoint_dir(c.dir);
}

int64_t set_aside_after(const std::string& run_dir, int64_t step) {
  const fs::path run(run_dir), aside = run / kSupersededDir;
  int64_t moved = 0;
  for (const auto& c : list_checkpoints(run_dir)) {
    if (c.step <= step) continue;
    if (!fs::exists(aside)) fs::create_directories(aside);
    const auto name = fs::path(c.dir).filename().string();
    fs::path target = aside / name;
    for (int k = 2; fs::exists(target); ++k) target = aside / (name + "-" + std::to_string(k));
    fs::rename(c.dir, target);  // atomic: the checkpoint is whole on either side
    ++moved;
  }
  if (moved > 0) {
    files::sync_directory((run / layout::kCheckpoints).string());
    files::sync_directory(aside.string());
  }
  for (const char* log : {"metrics", "memory"}) {
    const auto path = run / (std::string(log) + ".jsonl");
    if (fs::exists(path))
      move_json_lines_after(path.string(), step, (run / (std::string(log) + ".superseded.jsonl")).string());
  }
  return moved;
}

ResumeTarget resolve_resume(const std::string& arg, const std::string& runs_dir) {
  if (arg == "latest") {
    if (runs_dir.empty())
      throw InputError("--resume latest: expected a directory of runs to search, got none");
    std::vector<std::string> candidates;
    if (const auto c = latest_of_run(runs_dir)) {
      candidates.push_back(*c);
    } else if (fs::is_directory(runs_dir)) {
      for (const auto& entry : fs::directory_iterator(runs_dir))
        if (const auto c = latest_of_run(entry.path())) candidates.push_back(*c);
    }
    if (candidates.empty())
      throw InputError(c10::str(runs_dir, ": --resume latest: expected a run directory, or a "
                                "directory of runs, with a complete checkpoint; found none"));
    // The most recently written: the manifest is the last file of a save.
    const auto written = [](const std::string& c) {
      return fs::last_write_time(fs::path(c) / layout::kManifest);
    };
    const auto newest = *std::max_element(candidates.begin(), candidates.end(),
        [&](const auto& a, const auto& b) { return written(a) < written(b); });
    return {fs::path(newest).parent_path().parent_path().string(), newest};
  }
  fs::path p = fs::path(arg).lexically_normal();
  if (p.has_parent_path() && p.filename().empty()) p = p.parent_path();  // "dir/"
  if (fs::exists(p / layout::kManifest)) {
    const fs::path parent = fs::absolute(p).parent_path();
    return {parent.filename() == layout::kCheckpoints ? parent.parent_path().string() : "",
            p.string()};
  }
  if (fs::is_directory(p / layout::kCheckpoints)) {
    const auto c = latest_checkpoint(p.string());
    if (!c)
      throw InputError(c10::str(arg, ": --resume: expected a complete checkpoint under ",
                                layout::kCheckpoints, "/, found none"));
    return {p.string(), *c};
  }
  throw InputError(c10::str(arg, ": --resume: expected a checkpoint directory (with ",
                            layout::kManifest, "), a run directory (with ", layout::kCheckpoints,
                            "/) or 'latest', found ",
                            !fs::exists(p)        ? "nothing"
                            : fs::is_directory(p) ? "a directory with neither"
                                                  : "a file"));
}

std::string resolve_checkpoint(const std::string& arg) {
  if (arg.empty())  // not the current directory: an unset shell variable, most likely
    throw InputError(c10::str("CHECKPOINT: expected a checkpoint directory (with ", layout::kManifest,
                              ") or a run directory (with ", layout::kCheckpoints, "/), found an empty name"));
  fs::path p = fs::path(arg).lexically_normal();
  if (p.has_parent_path() && p.filename().empty()) p = p.parent_path();  // "dir/"
  if (fs::exists(p / layout::kManifest)) return p.string();
  if (fs::is_directory(p / layout::kCheckpoints)) {
    if (auto c = latest_checkpoint(p.string())) return *c;
    throw InputError(c10::str(arg, ": expected a complete checkpoint under ",
                              layout::kCheckpoints, "/, found none"));
  }
  throw InputError(c10::str(arg, ": CHECKPOINT: expected a checkpoint directory (with ",
                            layout::kManifest, ") or a run directory (with ",
                            layout::kCheckpoints, "/), found ",
                            !fs::exists(p)        ? "nothing"
                            : fs::is_directory(p) ? "a directory with neither"
                                                  : "a file"));
}


}  // namespace kiln::train
