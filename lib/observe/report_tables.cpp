// The report's tables as HTML: every cell escaped, numbers with four significant
// digits (accuracy in percent), "NaN" for a null (how nlohmann writes NaN and ±inf).
#include "observe/report_tables.h"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <unordered_set>

namespace kiln::observe {
namespace {

std::string number(double v, const char* format = "%.4g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// A cell of a metrics table: `key` decides the form (accuracy in %, samples/s whole, seconds).
std::string cell(const nlohmann::json& line, const std::string& key) {
  if (!line.is_object() || !line.contains(key)) return "";
  const auto& v = line.at(key);
  if (v.is_null()) return "NaN";
  if (!v.is_number()) return xml_escape(v.dump());
  const double d = v.get<double>();
  if (key.size() >= 8 && key.compare(key.size() - 8, 8, "accuracy") == 0) return number(100 * d, "%.2f %%");
  if (key == "samples_per_s" || key == "tokens_per_s") return number(d, "%.0f");
  if (key == "elapsed_s") return number(d, "%.1f s");
  if (key == "step" || key == "epoch") return number(d, "%.0f");
  return number(d);
}

std::string swatch(size_t run) {
  return c10::str("<span class=\"swatch\" style=\"background:", kPalette[run % kPaletteSize], "\"></span>");
}

std::string run_cell(const std::vector<std::string>& labels, size_t i) {
  return c10::str("<td class=\"text\">", swatch(i), xml_escape(labels[i]), "</td>");
}

// Keys in the order of first appearance over `lines`.
std::vector<std::string> union_keys(const std::vector<const nlohmann::json*>& objects) {
  std::vector<std::string> keys;
  std::unordered_set<std::string> seen;  // a million classes: no search of `keys` per key
  for (const auto* o : objects)
    for (const auto& [k, v] : o->items())
      if (seen.insert(k).second) keys.push_back(k);
  return keys;
}

// The per-class table's most rows: a browser renders a table of a million rows (a
// run whose class ids were labels, not indices) slowly or not at all; metrics.jsonl
// keeps every class.
constexpr size_t kMaxClassRows = 1000;

}  // namespace

std::vector<std::string> run_labels(const std::vector<RunLog>& runs) {
  std::map<std::string, int> count;
  for (const auto& r : runs) ++count[r.name];
  std::vector<std::string> labels;
  for (const auto& r : runs) labels.push_back(count[r.name] > 1 ? r.dir : r.name);
  return labels;
}

std::string runs_table(const std::vector<RunLog>& runs, const std::vector<std::string>& labels) {
  std::ostringstream t;
  t << "<table class=\"runs\">\n<tr><th class=\"text\">run</th><th class=\"text\">directory</th>"
       "<th>last step</th><th>train lines</th><th>test lines</th><th>memory reports</th></tr>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& r = runs[i];
    double last = -1;
    for (const StepSeries* s : {&r.train, &r.test})
      for (const auto& [k, v] : s->values) last = std::max(last, v.back().x);
    t << "<tr>" << run_cell(labels, i) << "<td class=\"text\">" << xml_escape(r.dir) << "</td><td>"
      << (last >= 0 ? number(last, "%.0f") : "–") << "</td><td>" << r.train.lines << "</td><td>"
      << r.test.lines << "</td><td>" << (r.has_memory_file ? std::to_string(r.memory.lines) : "no file")
      << "</td></tr>\n";
  }
  t << "</table>\n";
  return t.str();
}

std::string final_metrics_table(const std::vector<RunLog>& runs, const std::vector<std::string>& labels) {
  // step, epoch, loss, the metrics, then the rest (train loss, throughput, time); no nested objects.
  std::vector<const nlohmann::json*> lines;
  for (const auto& r : runs)
    if (r.last_test.is_object()) lines.push_back(&r.last_test);
  if (lines.empty()) return "<p class=\"aside\">No test lines yet: no evaluation has run.</p>\n";
  const std::vector<std::string> first = {"step", "epoch", "loss"};
  const std::vector<std::string> last = {"train_loss", "samples_per_s", "elapsed_s"};
  std::vector<std::string> keys = first;
  for (const auto& k : union_keys(lines)) {
    const bool nested = std::any_of(lines.begin(), lines.end(), [&](const auto* l) {
      return l->contains(k) && l->at(k).is_structured();
    });
    if (k != "split" && !nested && std::find(first.begin(), first.end(), k) == first.end() &&
        std::find(last.begin(), last.end(), k) == last.end())
      keys.push_back(k);
  }
  keys.insert(keys.end(), last.begin(), last.end());
  static const std::map<std::string, std::string> headings = {
      {"loss", "test loss"}, {"train_loss", "train loss"}, {"samples_per_s", "samples/s"},
      {"elapsed_s", "elapsed"}, {"bits_per_char", "bits/char"}};
  std::ostringstream t;
  t << "<table class=\"final\">\n<tr><th class=\"text\">run</th>";
  for (const auto& k : keys) t << "<th>" << xml_escape(headings.count(k) ? headings.at(k) : k) << "</th>";
  t << "</tr>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    t << "<tr>" << run_cell(labels, i);
    for (const auto& k : keys) t << "<td>" << (runs[i].last_test.is_object() ? cell(runs[i].last_test, k) : "–") << "</td>";
    t << "</tr>\n";
  }
  t << "</table>\n";
  return t.str();
}

std::string per_class_tables(const std::vector<RunLog>& runs, const std::vector<std::string>& labels) {
  std::ostringstream t;
  std::vector<size_t> with;
  std::vector<const nlohmann::json*> objects;
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& l = runs[i].last_test;
    if (l.is_object() && l.contains("per_class_accuracy") && l.at("per_class_accuracy").is_object()) {
      with.push_back(i);
      objects.push_back(&l.at("per_class_accuracy"));
    }
  }
  if (!with.empty()) {
    t << "<h2>Test accuracy by class</h2>\n<table class=\"per-class\">\n<tr><th class=\"text\">class</th>";
    for (const size_t i : with) t << "<th class=\"text\">" << swatch(i) << xml_escape(labels[i]) << "</th>";
    t << "</tr>\n";
    auto classes = union_keys(objects);
    // Class ids as numbers ("10" after "9"), as the run numbered them; names as they sort.
    if (std::all_of(classes.begin(), classes.end(), [](const std::string& c) {
          return !c.empty() && std::all_of(c.begin(), c.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
        }))
      std::stable_sort(classes.begin(), classes.end(), [](const std::string& a, const std::string& b) {
        return a.size() != b.size() ? a.size() < b.size() : a < b;
      });
    for (size_t r = 0; r < classes.size() && r < kMaxClassRows; ++r) {
      const auto& c = classes[r];
      t << "<tr><td class=\"text\">" << xml_escape(c) << "</td>";
      for (const auto* o : objects) {
        // null: the test split has no example of the class (the console's "-").
        const std::string v = !o->contains(c)         ? ""
                              : o->at(c).is_null()    ? "–"
                                                      : cell(nlohmann::json{{"accuracy", o->at(c)}}, "accuracy");
        t << "<td>" << v << "</td>";
      }
      t << "</tr>\n";
    }
    t << "</table>\n";
    if (classes.size() > kMaxClassRows)
      t << "<p>The first " << kMaxClassRows << " of " << classes.size()
        << " classes; every class is in the runs' metrics.jsonl (the last test line's per_class_accuracy).</p>\n";
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& l = runs[i].last_test;
    if (!l.is_object() || !l.contains("per_depth") || !l.at("per_depth").is_object()) continue;
    const auto& per_depth = l.at("per_depth");
    std::vector<const nlohmann::json*> entries;
    for (const auto& [depth, e] : per_depth.items())
      if (e.is_object()) entries.push_back(&e);
    const auto keys = union_keys(entries);
    // Depths as numbers: "10" after "9".
    std::vector<std::string> depths;
    for (const auto& [depth, e] : per_depth.items()) depths.push_back(depth);
    std::stable_sort(depths.begin(), depths.end(), [](const std::string& a, const std::string& b) {
      return a.size() != b.size() ? a.size() < b.size() : a < b;
    });
    t << "<h2>" << swatch(i) << xml_escape(labels[i]) << ": the test set at each depth</h2>\n<table class=\"per-depth\">\n<tr><th>depth</th>";
    for (const auto& k : keys) t << "<th>" << xml_escape(k == "loss" ? "test loss" : k) << "</th>";
    t << "</tr>\n";
    for (const auto& d : depths) {
      t << "<tr><td>" << xml_escape(d) << "</td>";
      for (const auto& k : keys) t << "<td>" << cell(per_depth.at(d), k) << "</td>";
      t << "</tr>\n";
    }
    t << "</table>\n";
  }
  return t.str();
}

std::vector<std::pair<std::string, std::string>> config_entries(const std::string& toml) {
  std::vector<std::pair<std::string, std::string>> entries;
  std::string section;
  std::istringstream in(toml);
  const auto trim = [](std::string s) {
    const auto b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  for (std::string line; std::getline(in, line);) {
    // The line up to a # outside quotes ('…' literal, "…" with \ escapes).
    char quote = 0;
    size_t end = line.size();
    for (size_t i = 0; i < line.size(); ++i) {
      const char c = line[i];
      if (quote) {
        if (c == '\\' && quote == '"') ++i;
        else if (c == quote) quote = 0;
      } else if (c == '\'' || c == '"') {
        quote = c;
      } else if (c == '#') {
        end = i;
        break;
      }
    }
    const std::string code = trim(line.substr(0, end));
    if (code.empty()) continue;
    if (code.front() == '[' && code.back() == ']') {
      section = trim(code.substr(1, code.size() - 2));
      continue;
    }
    const auto eq = code.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = trim(code.substr(0, eq));
    entries.emplace_back(section.empty() ? key : section + "." + key, trim(code.substr(eq + 1)));
  }
  return entries;
}

std::string config_section(const std::vector<RunLog>& runs, const std::vector<std::string>& labels) {
  std::ostringstream t;
  if (runs.size() > 1) {
    std::vector<std::map<std::string, std::string>> values;
    std::vector<std::string> order;
    for (const auto& r : runs) {
      values.emplace_back();
      for (const auto& [k, v] : config_entries(r.config_toml)) {
        if (std::find(order.begin(), order.end(), k) == order.end()) order.push_back(k);
        values.back()[k] = v;
      }
    }
    std::vector<std::string> differ;
    for (const auto& k : order) {
      std::set<std::string> seen;
      for (const auto& v : values) seen.insert(v.count(k) ? v.at(k) : "\x01unset");
      if (seen.size() > 1) differ.push_back(k);
    }
    t << "<h2>Config: the keys that differ</h2>\n";
    if (differ.empty()) {
      t << "<p class=\"aside\">The runs' config.toml files set every key alike.</p>\n";
    } else {
      t << "<table class=\"config-diff\">\n<tr><th class=\"text\">key</th>";
      for (size_t i = 0; i < runs.size(); ++i) t << "<th class=\"text\">" << swatch(i) << xml_escape(labels[i]) << "</th>";
      t << "</tr>\n";
      for (const auto& k : differ) {
        t << "<tr><td class=\"text\">" << xml_escape(k) << "</td>";
        for (const auto& v : values)
          t << "<td class=\"text\">" << (v.count(k) ? xml_escape(v.at(k)) : "<span class=\"aside\">unset</span>") << "</td>";
        t << "</tr>\n";
      }
      t << "</table>\n";
    }
  }
  t << "<h2>Config</h2>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    t << "<details" << (runs.size() == 1 ? " open" : "") << "><summary>" << swatch(i) << xml_escape(labels[i])
      << ": config.toml</summary>\n";
    if (runs[i].config_toml.empty()) t << "<p class=\"aside\">This run has no config.toml.</p>";
    else t << "<pre>" << xml_escape(runs[i].config_toml) << "</pre>";
    t << "</details>\n";
  }
  return t.str();
}

}  // namespace kiln::observe
