// What `kiln report` reads from a run directory: metrics.jsonl and memory.jsonl as
// numbers over steps, the resolved config and the last test line. Reading only:
// nothing in the run directory is written.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "observe/svg_plot.h"

namespace kiln::observe {

/// The lines of one split of a JSON-lines file as numbers over steps.
struct StepSeries {
  int64_t lines = 0;                               // lines of this split read
  int64_t repeated_steps = 0;                      // lines whose step did not exceed the line before
  std::map<std::string, std::vector<Point>> values;  // key → (step, value), by step, one per step (the later line wins), finite
  std::map<std::string, std::vector<int64_t>> non_finite;  // key → steps whose value was NaN or ±inf (JSON null), not in `values`
  bool has(const std::string& key) const { return values.count(key) > 0; }
};

/// One run directory, read. Example: const auto run = kiln::observe::read_run("runs/a");
struct RunLog {
  std::string dir;   // as given
  std::string name;  // its last path component
  StepSeries train;  // metrics.jsonl, "split":"train": loss, lr, grad_norm, skipped_steps, samples_per_s, …
  StepSeries test;   // metrics.jsonl, "split":"test": loss, accuracy | bits_per_char | rmse, r2, …, train_loss, …
  StepSeries memory;  // memory.jsonl: rss_bytes, heap_bytes, …, cuda.allocated_bytes (nested objects as a.b)
  nlohmann::json last_test;  // the test line of the highest step (the later of equals); null when none
  std::string config_toml;   // config.toml; "" when the run has none
  bool has_memory_file = false;
  std::map<std::string, int64_t> other_splits;  // lines of a split other than train and test: not plotted
  std::vector<std::string> warnings;  // a skipped last line cut short (a run still writing): printed and shown
};

/// Reads RUN/metrics.jsonl (required), memory.jsonl and config.toml (optional). Bad input
/// throws kiln::InputError naming the file, the line, what was expected and what was found:
/// a missing directory, one without metrics.jsonl, a line that is not a JSON object with a
/// numeric "step" (metrics: and a "split"). A last line cut short — no newline after it
/// and not whole JSON, as a run still writing leaves it — is skipped with a warning.
/// NaN, Infinity and -Infinity written as bare words (Python's json) are read as null.
RunLog read_run(const std::string& dir);

}  // namespace kiln::observe
