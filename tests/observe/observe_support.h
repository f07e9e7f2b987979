// What the report tests share: the polylines of a page or chart (as written, or as
// Chromium serialises them) and synthetic run directories of known lines.
#pragma once
#include <fstream>
#include <regex>
#include <sstream>
#include <cctype>
#include <string>
#include <vector>

namespace kiln::test {

struct Polyline {
  int colour = -1, dash = -1;  // data-colour, data-dash
  size_t points = 0;           // x,y pairs in points="…"
};

/// The value of attribute `name` in an element's attribute text, or "" without one.
inline std::string attribute_of(const std::string& attributes, const std::string& name) {
  const std::string key = " " + name + "=\"";
  auto at = (" " + attributes).find(key);
  if (at == std::string::npos) return "";
  at += key.size() - 1;  // in `attributes`, which lacks the leading space
  return attributes.substr(at, attributes.find('"', at) - at);
}

/// Every <polyline class="series"> of `html`, in order, whatever order its attributes
/// have. Scanned with find, not std::regex: libstdc++'s regex recurses once a character,
/// and a line of thousands of points overflowed the stack under AddressSanitizer.
inline std::vector<Polyline> polylines(const std::string& html) {
  std::vector<Polyline> out;
  for (size_t at = html.find("<polyline"); at != std::string::npos; at = html.find("<polyline", at + 1)) {
    const size_t begin = at + std::string("<polyline").size();
    if (begin >= html.size() || !std::isspace(static_cast<unsigned char>(html[begin]))) continue;
    const std::string attributes = html.substr(begin, html.find('>', begin) - begin);
    if (attributes.find("class=\"series\"") == std::string::npos) continue;
    Polyline p;
    if (const auto c = attribute_of(attributes, "data-colour"); !c.empty()) p.colour = std::stoi(c);
    if (const auto d = attribute_of(attributes, "data-dash"); !d.empty()) p.dash = std::stoi(d);
    std::istringstream list(attribute_of(attributes, "points"));
    for (std::string xy; list >> xy;) p.points += xy.find(',') != std::string::npos;
    out.push_back(p);
  }
  return out;
}

/// The charts of a page: the text of each <svg class="chart"> … </svg>, in order.
inline std::vector<std::string> charts(const std::string& html) {
  std::vector<std::string> out;
  for (size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1))
    out.push_back(html.substr(at, html.find("</svg>", at) - at));
  return out;
}

/// Writes `text` to `path`. Example: write_file(dir / "run/metrics.jsonl", lines);
inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

/// The metrics.jsonl of a run of `train` train lines (every 10 steps) and `test` test
/// lines (every 100 steps), as the trainer writes them; loss and accuracy improve. Runs
/// of another `shift` have other values (their lines do not hide each other).
inline std::string metrics_lines(int train, int test, double shift = 0) {
  const auto number = [](double v) { return std::to_string(v); };
  std::string s;
  for (int i = 1; i <= train; ++i) {
    const int step = 10 * i;
    s += "{\"split\":\"train\",\"step\":" + std::to_string(step) + ",\"epoch\":1,\"loss\":" +
         number((2.0 + shift) / (1 + 0.01 * step)) + ",\"lr\":" + number(0.001 * (1 + shift)) +
         ",\"grad_norm\":" + number(1.0 + shift + 0.5 * (i % 3)) + ",\"skipped_steps\":0,\"samples_per_s\":" +
         number(20000 * (1 + shift) + 100 * (i % 7)) + "}\n";
    if (step % 100 == 0 && step / 100 <= test)
      s += "{\"split\":\"test\",\"step\":" + std::to_string(step) + ",\"epoch\":1,\"loss\":" +
           number((2.2 + shift) / (1 + 0.01 * step)) + ",\"accuracy\":" + number(0.5 - 0.1 * shift + 0.004 * step / 10) +
           ",\"train_loss\":0.5,\"samples_per_s\":19000,\"elapsed_s\":" + number(step / 100.0) + "}\n";
  }
  return s;
}

/// A memory.jsonl of `n` reports (every 50 steps), CPU only.
inline std::string memory_lines(int n) {
  std::string s;
  for (int i = 1; i <= n; ++i)
    s += "{\"step\":" + std::to_string(50 * i) + ",\"rss_bytes\":" + std::to_string(500000000 + 1000000 * i) +
         ",\"peak_rss_bytes\":510000000,\"heap_bytes\":140000000,\"parameter_bytes\":2143272,"
         "\"gradient_bytes\":2143272,\"optimizer_state_bytes\":4286544,\"uncounted_optimizer_states\":0,"
         "\"activation_peak_bytes\":1430832,\"cuda\":null}\n";
  return s;
}

}  // namespace kiln::test
