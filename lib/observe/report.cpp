// render_report(): which charts a set of runs gets and what each draws, the tables,
// and the notes that say what was left out (non-finite values, downsampled lines).
#include "observe/report.h"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "observe/report_tables.h"

namespace kiln::observe {
namespace {

enum class Source { kTrain, kTest, kMemory };

// One line of a chart per run: a key of one file, its dash and its legend name.
struct LineSpec {
  Source source;
  std::string key;
  std::string name;  // "train", "test", "resident", …
};

struct ChartSpec {
  std::string title, y_label;
  bool log_y = false;
  bool include_zero = false;  // sizes and rates: from 0
  double scale = 1.0;  // values are multiplied by it (bytes → MiB)
  std::vector<LineSpec> lines;
};

constexpr double kMiB = 1.0 / (1024.0 * 1024.0);

// Keys of test lines that are not a test metric.
const std::set<std::string> kNotMetrics = {"epoch", "loss", "train_loss", "samples_per_s", "elapsed_s"};

const StepSeries& of(const RunLog& run, Source s) {
  return s == Source::kTrain ? run.train : s == Source::kTest ? run.test : run.memory;
}

bool any_run_has(const std::vector<RunLog>& runs, Source s, const std::string& key) {
  for (const auto& r : runs)
    if (of(r, s).has(key) || of(r, s).non_finite.count(key)) return true;
  return false;
}

// skipped_steps is worth a chart only when a step was skipped.
bool any_step_skipped(const std::vector<RunLog>& runs) {
  for (const auto& r : runs)
    if (r.train.has("skipped_steps"))
      for (const auto& p : r.train.values.at("skipped_steps"))
        if (p.y != 0) return true;
  return false;
}

std::string metric_title(const std::string& key) {
  static const std::map<std::string, std::string> known = {
      {"accuracy", "accuracy (0..1)"}, {"bits_per_char", "bits per character"}, {"rmse", "RMSE"}, {"r2", "R²"}};
  if (const auto k = known.find(key); k != known.end()) return k->second;
  std::string t = key;
  std::replace(t.begin(), t.end(), '_', ' ');
  return t;
}

// The test metrics of any run: the known ones in this order, then the others by name.
std::vector<std::string> test_metrics(const std::vector<RunLog>& runs) {
  std::set<std::string> all;
  for (const auto& r : runs) {
    for (const auto& [k, v] : r.test.values) all.insert(k);
    for (const auto& [k, v] : r.test.non_finite) all.insert(k);
  }
  std::vector<std::string> ordered;
  for (const char* k : {"accuracy", "bits_per_char", "rmse", "r2"})
    if (all.count(k)) ordered.push_back(k);
  for (const auto& k : all)
    if (!kNotMetrics.count(k) && std::find(ordered.begin(), ordered.end(), k) == ordered.end())
      ordered.push_back(k);
  return ordered;
}

// Every chart the runs have data for, in the page's order.
std::vector<ChartSpec> charts_for(const std::vector<RunLog>& runs) {
  std::vector<ChartSpec> charts;
  charts.push_back({"loss", "loss", true, false, 1.0,
                    {{Source::kTrain, "loss", "train"}, {Source::kTest, "loss", "test"}}});
  for (const auto& m : test_metrics(runs))
    charts.push_back({"test " + metric_title(m), metric_title(m), false, false, 1.0, {{Source::kTest, m, "test"}}});
  const auto train_chart = [&](const char* key, const char* title, const char* y_label, bool log) {
    if (any_run_has(runs, Source::kTrain, key))
      charts.push_back({title, y_label, log, !log, 1.0, {{Source::kTrain, key, "train"}}});
  };
  train_chart("lr", "learning rate", "learning rate", false);
  train_chart("grad_norm", "gradient norm (before clipping)", "norm", true);
  train_chart("loss_scale", "loss scale (fp16)", "scale", true);
  if (any_step_skipped(runs)) train_chart("skipped_steps", "steps skipped (inf/NaN gradients, fp16), total", "steps", false);
  train_chart("samples_per_s", "throughput: samples/s", "samples/s", false);
  train_chart("tokens_per_s", "throughput: tokens/s", "tokens/s", false);

  // Memory: the known figures grouped, in MiB; any other *_bytes figure on its own.
  const std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> groups = {
      {"memory: process", {{"rss_bytes", "resident"}, {"peak_rss_bytes", "resident peak"}, {"heap_bytes", "heap in use"}}},
      {"memory: model", {{"parameter_bytes", "parameters"}, {"gradient_bytes", "gradients"},
                         {"optimizer_state_bytes", "optimizer state"}}},
      {"memory: activations (step peak)", {{"activation_peak_bytes", "activations"}}},
      {"memory: CUDA", {{"cuda.allocated_bytes", "allocated"}, {"cuda.reserved_bytes", "reserved"},
                        {"cuda.peak_allocated_bytes", "peak allocated"}, {"cuda.peak_reserved_bytes", "peak reserved"}}}};
  std::set<std::string> grouped = {"cuda.total_bytes"};  // the device's size: a constant, in the notes' place
  for (const auto& [title, keys] : groups) {
    ChartSpec c{title, "MiB", false, true, kMiB, {}};
    for (const auto& [key, name] : keys) {
      grouped.insert(key);
      if (any_run_has(runs, Source::kMemory, key)) c.lines.push_back({Source::kMemory, key, name});
    }
    if (!c.lines.empty()) charts.push_back(c);
  }
  std::set<std::string> others;
  for (const auto& r : runs)
    for (const auto& [k, v] : r.memory.values)
      if (k.size() > 6 && k.compare(k.size() - 6, 6, "_bytes") == 0 && !grouped.count(k)) others.insert(k);
  for (const auto& k : others) charts.push_back({"memory: " + k, "MiB", false, true, kMiB, {{Source::kMemory, k, k}}});
  return charts;
}

std::string steps_list(const std::vector<int64_t>& steps) {
  std::vector<std::string> shown;
  for (size_t i = 0; i < steps.size() && i < 5; ++i) shown.push_back(std::to_string(steps[i]));
  return c10::str(c10::Join(", ", shown), steps.size() > 5 ? ", …" : "");
}

const char* kStyle = R"(body{font:14px/1.45 system-ui,sans-serif;color:#1f2328;margin:24px;max-width:1352px}
h1{font-size:22px;margin:0 0 12px}h2{font-size:17px;margin:28px 0 10px}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid #d8dee4;padding:3px 10px;text-align:right;vertical-align:top}
th{background:#f6f8fa}td.text,th.text{text-align:left}
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px;vertical-align:-1px}
.charts{display:flex;flex-wrap:wrap;gap:14px 20px}
.chart text{font:11px sans-serif;fill:#374151}.chart .title{font-size:13px;font-weight:600;fill:#1f2328}
.chart .aside{font-weight:400;fill:#6b7280}.aside{color:#6b7280}
ul.notes{padding-left:20px}ul.notes li{margin:2px 0}
pre{background:#f6f8fa;padding:10px;overflow:auto;font-size:12px;line-height:1.35}
summary{cursor:pointer;margin:6px 0}
)";

}  // namespace

std::string render_report(const std::vector<RunLog>& runs) {
  std::vector<std::string> labels = run_labels(runs);
  std::vector<std::string> notes;
  for (const auto& r : runs)
    for (const auto& w : r.warnings) notes.push_back(w);
  if (static_cast<int>(runs.size()) > kPaletteSize)
    notes.push_back(c10::str(runs.size(), " runs and ", kPaletteSize, " colours: run ", kPaletteSize + 1,
                             " on repeats the colours"));

  // Each chart's lines per run (scaled, downsampled), and the steps all of them span.
  struct Drawn {
    ChartOptions options;
    std::vector<Series> series;
  };
  std::vector<Drawn> drawn;
  double x_lo = 0, x_hi = -std::numeric_limits<double>::infinity();  // steps count from 0
  for (const auto& spec : charts_for(runs)) {
    Drawn d;
    d.options.title = spec.title;
    d.options.y_label = spec.y_label;
    d.options.log_y = spec.log_y;
    d.options.include_zero = spec.include_zero;
    if (spec.lines.size() > 1)
      for (const auto& l : spec.lines) d.options.dash_names.push_back(l.name);
    for (size_t i = 0; i < runs.size(); ++i) {
      for (size_t li = 0; li < spec.lines.size(); ++li) {
        const auto& line = spec.lines[li];
        const StepSeries* source = &of(runs[i], line.source);
        std::string key = line.key;
        // A run without train lines (train.log_every longer than it) still has the
        // mean train loss of each test line.
        if (line.source == Source::kTrain && key == "loss" && !source->has("loss") &&
            runs[i].test.has("train_loss")) {
          source = &runs[i].test;
          key = "train_loss";
          notes.push_back(c10::str(labels[i], ": no train lines (train.log_every is longer than the run?): "
                                   "its train loss is the test lines' train_loss, the mean since the evaluation before"));
        }
        const std::string what = c10::str(labels[i], ": ", spec.title, line.name == spec.title ? "" : " (" + line.name + ")");
        if (const auto nf = source->non_finite.find(key); nf != source->non_finite.end())
          notes.push_back(c10::str(what, ": ", nf->second.size(), " value", nf->second.size() == 1 ? " was" : "s were",
                                   " NaN or infinite, not drawn (step ", steps_list(nf->second), ")"));
        const auto v = source->values.find(key);
        if (v == source->values.end()) continue;
        std::vector<Point> points = v->second;
        for (auto& p : points) p.y *= spec.scale;
        if (points.size() > kMaxPointsPerLine) {
          notes.push_back(c10::str(what, ": ", points.size(), " points drawn as ", kMaxPointsPerLine,
                                   " (the lowest and highest of each stretch of steps, and the first and last)"));
          points = downsample_min_max(points, kMaxPointsPerLine);
        }
        x_lo = std::min(x_lo, points.front().x);
        x_hi = std::max(x_hi, points.back().x);
        d.series.push_back({labels[i], static_cast<int>(i), static_cast<int>(li), line.source == Source::kTest,
                            std::move(points)});
      }
    }
    drawn.push_back(std::move(d));
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& r = runs[i];
    if (r.test.lines == 0) notes.push_back(c10::str(labels[i], ": no test lines yet (no evaluation has run)"));
    if (r.train.repeated_steps + r.test.repeated_steps > 0)
      notes.push_back(c10::str(labels[i], ": ", r.train.repeated_steps + r.test.repeated_steps,
                               " lines of metrics.jsonl went back to an earlier step: drawn by step, the later line of a step kept"));
    for (const auto& [split, n] : r.other_splits)
      notes.push_back(c10::str(labels[i], ": ", n, " lines of split \"", split, "\" not drawn (only train and test are)"));
    if (!r.has_memory_file) notes.push_back(c10::str(labels[i], ": no memory.jsonl"));
    if (r.memory.lines == 1)
      notes.push_back(c10::str(labels[i], ": one memory report, at the end (memory.report_every = N reports every N steps)"));
    if (r.config_toml.empty()) notes.push_back(c10::str(labels[i], ": no config.toml"));
  }
  // Runs without loss scaling (fp32, bf16) have no loss_scale; runs written before kiln
  // logged it have only the skipped steps.
  if (!any_run_has(runs, Source::kTrain, "loss_scale") && any_step_skipped(runs))
    notes.push_back("metrics.jsonl holds no loss scale (a run from before kiln logged it): the count of "
                    "skipped steps is drawn alone");

  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n" << kReportMarker
       << "\n<title>kiln report: " << xml_escape(c10::Join(", ", labels)) << "</title>\n<style>\n"
       << kStyle << "</style>\n</head>\n<body>\n<h1>kiln report</h1>\n";
  html << runs_table(runs, labels);
  if (!notes.empty()) {
    html << "<ul class=\"notes\">\n";
    for (const auto& n : notes) html << "<li>" << xml_escape(n) << "</li>\n";
    html << "</ul>\n";
  }
  html << "<h2>Final metrics</h2>\n" << final_metrics_table(runs, labels);
  html << "<h2>Over steps</h2>\n<div class=\"charts\">\n";
  for (auto& d : drawn) {
    if (x_lo <= x_hi) d.options.x_domain = std::make_pair(x_lo, x_hi);
    html << render_chart(d.options, d.series);
  }
  html << "</div>\n<p class=\"aside\">Loss, gradient norm and loss scale on a log scale (they span "
          "orders of magnitude), linear when a value is ≤ 0; everything else linear. Memory in MiB "
          "(2<sup>20</sup> bytes). Dots mark test lines. At most "
       << kMaxPointsPerLine << " points a line; NaN and infinite values are not drawn (the notes above "
          "say where).</p>\n";
  html << per_class_tables(runs, labels) << config_section(runs, labels) << "</body>\n</html>\n";
  return html.str();
}

}  // namespace kiln::observe
