// render_chart(): data coordinates → pixels, ticks and their labels, the lines, the
// legend; and the helpers a report shares with it (downsampling, escaping).
#include "observe/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <tuple>

namespace kiln::observe {
namespace {

constexpr const char* kDashes[] = {"", "6 4", "2 3", "8 3 2 3"};
constexpr int kLeft = 66, kRight = 16, kTop = 30;  // margins of the plot area
constexpr int kBelow = 40;                          // x tick labels and the x label
constexpr int kLegendRow = 16;
constexpr double kCharWidth = 6.4;  // a generous average for 11px sans-serif

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// A pixel coordinate: one decimal is finer than any screen needs.
std::string px(double v) { return fmt("%.1f", v); }

// One axis: the data's range (after padding) onto [pixel_lo, pixel_hi], log10 or linear.
struct Axis {
  double lo, hi;  // in data units
  bool log;
  double pixel_lo, pixel_hi;
  double to_pixel(double v) const {
    const double a = log ? std::log10(lo) : lo, b = log ? std::log10(hi) : hi;
    const double t = ((log ? std::log10(v) : v) - a) / (b - a);
    return pixel_lo + t * (pixel_hi - pixel_lo);
  }
};

// [lo, hi] widened by 5 % of its span on each side (log: of its span in decades), and
// opened up when the data is one value.
std::pair<double, double> padded(double lo, double hi, bool log) {
  if (log) {
    const auto [a, b] = padded(std::log10(lo), std::log10(hi), false);
    return {std::pow(10.0, a), std::pow(10.0, b)};
  }
  if (hi == lo) {
    const double d = lo == 0 ? 1.0 : std::abs(lo) * 0.05;
    return {lo - d, hi + d};
  }
  const double d = (hi - lo) * 0.05;
  return {lo - d, hi + d};
}

// The spacing of nice ticks, about span / target: m × 10^e with m 1, 2 or 5.
struct Step {
  int m, e;
  double value() const { return m * std::pow(10.0, e); }
  // k steps, as exactly as a double holds it (3 × 0.2 gives 0.6000000000000001; 6 / 10 gives 0.6).
  double times(double k) const { return e < 0 ? k * m / std::pow(10.0, -e) : k * m * std::pow(10.0, e); }
};
Step nice_step(double span, int target) {
  const double raw = span / std::max(target, 1);
  const int e = static_cast<int>(std::floor(std::log10(raw)));
  for (const int m : {1, 2, 5})
    if (raw <= m * std::pow(10.0, e) * 1.0000001) return {m, e};
  return {1, e + 1};
}

struct LegendEntry {
  std::string label;
  std::string colour;  // "" for a dash entry (drawn grey)
  int dash;
};

}  // namespace

std::vector<double> linear_ticks(double lo, double hi, int target) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const Step step = nice_step(hi - lo, target);
  const double s = step.value();
  std::vector<double> ticks;
  for (double k = std::ceil(lo / s - 1e-9); k * s <= hi + s * 1e-9; k += 1.0)
    ticks.push_back(k == 0 ? 0.0 : step.times(k));  // no "-0"
  return ticks;
}

std::vector<double> log_ticks(double lo, double hi) {
  if (!(lo > 0) || !(hi > lo)) return {lo};
  const auto with = [&](std::initializer_list<double> mantissas) {
    std::vector<double> ticks;
    for (int e = static_cast<int>(std::floor(std::log10(lo))); e <= std::ceil(std::log10(hi)); ++e)
      for (const double m : mantissas) {
        const double v = m * std::pow(10.0, e);
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) ticks.push_back(v);
      }
    return ticks;
  };
  auto ticks = with({1.0});
  if (ticks.size() > 8) {  // many decades: every other power of ten
    std::vector<double> fewer;
    for (size_t i = 0; i < ticks.size(); i += 2) fewer.push_back(ticks[i]);
    return fewer;
  }
  if (ticks.size() >= 3) return ticks;
  ticks = with({1.0, 2.0, 5.0});
  if (ticks.size() >= 3) return ticks;
  ticks = with({1.0, 2.0, 3.0, 5.0});
  if (ticks.size() >= 3) return ticks;
  ticks = with({1, 2, 3, 4, 5, 6, 7, 8, 9});
  if (ticks.size() >= 3 && ticks.size() <= 10) return ticks;
  return linear_ticks(lo, hi, 4);  // less than a decade: round values, log-placed
}

std::string tick_label(double value, double step) {
  if (value == 0) return "0";
  const double a = std::abs(value);
  step = std::abs(step) > 0 ? std::abs(step) : a;
  if (a >= 1e4 && a < 1e15 && step >= 1) {
    const char* suffix = a >= 1e12 ? "T" : a >= 1e9 ? "G" : a >= 1e6 ? "M" : "k";
    const double scale = a >= 1e12 ? 1e12 : a >= 1e9 ? 1e9 : a >= 1e6 ? 1e6 : 1e3;
    const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step / scale) + 1e-9)));
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f%s", decimals, value / scale, suffix);
    return buf;
  }
  if (a < 1e-3 || a >= 1e15) {
    const int digits = std::max(1, static_cast<int>(std::floor(std::log10(a) + 1e-9) -
                                                    std::floor(std::log10(step) + 1e-9)) + 1);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*g", std::min(digits, 6), value);
    return buf;
  }
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", std::min(decimals, 9), value);
  return buf;
}

std::string xml_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::vector<Point> downsample_min_max(const std::vector<Point>& points, size_t max_points) {
  if (points.size() <= max_points || max_points < 4) return points;
  const size_t buckets = (max_points - 2) / 2;
  const size_t inner = points.size() - 2;  // the first and last are kept apart
  std::vector<Point> out;
  out.reserve(2 * buckets + 2);
  out.push_back(points.front());
  for (size_t b = 0; b < buckets; ++b) {
    const size_t begin = 1 + b * inner / buckets, end = 1 + (b + 1) * inner / buckets;
    if (begin == end) continue;
    size_t lo = begin, hi = begin;
    for (size_t i = begin; i < end; ++i) {
      if (points[i].y < points[lo].y) lo = i;
      if (points[i].y > points[hi].y) hi = i;
    }
    out.push_back(points[std::min(lo, hi)]);
    if (lo != hi) out.push_back(points[std::max(lo, hi)]);
  }
  out.push_back(points.back());
  return out;
}

std::string render_chart(const ChartOptions& o, const std::vector<Series>& series) {
  // The data's extent; log only when every value is > 0.
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo;
  double y_lo = x_lo, y_hi = -x_lo;
  size_t n_points = 0;
  for (const auto& s : series)
    for (const auto& p : s.points) {
      x_lo = std::min(x_lo, p.x), x_hi = std::max(x_hi, p.x);
      y_lo = std::min(y_lo, p.y), y_hi = std::max(y_hi, p.y);
      ++n_points;
    }
  const bool log = o.log_y && n_points > 0 && y_lo > 0;
  if (o.include_zero && !log && n_points > 0) y_lo = std::min(y_lo, 0.0), y_hi = std::max(y_hi, 0.0);
  if (o.x_domain) std::tie(x_lo, x_hi) = *o.x_domain;
  if (n_points == 0 && !o.x_domain) x_lo = 0, x_hi = 1;
  if (x_hi <= x_lo) x_lo -= 1, x_hi += 1;
  if (n_points == 0) y_lo = 0, y_hi = 1;

  // The legend: each colour once (first label), then the dash names in use.
  std::vector<LegendEntry> legend;
  std::vector<int> colours, dashes;
  for (const auto& s : series) {
    if (std::find(colours.begin(), colours.end(), s.colour) == colours.end()) {
      colours.push_back(s.colour);
      legend.push_back({s.label, kPalette[s.colour % kPaletteSize], 0});
    }
    if (std::find(dashes.begin(), dashes.end(), s.dash) == dashes.end()) dashes.push_back(s.dash);
  }
  std::sort(dashes.begin(), dashes.end());
  if (!o.dash_names.empty())
    for (const int d : dashes)
      if (d < static_cast<int>(o.dash_names.size())) legend.push_back({o.dash_names[d], "", d});
  const int plot_w = o.width - kLeft - kRight;
  std::vector<std::pair<int, int>> legend_at;  // x, row of each entry
  int row = 0, x = kLeft;
  for (const auto& e : legend) {
    const int w = 30 + static_cast<int>(kCharWidth * static_cast<double>(e.label.size())) + 16;
    if (x > kLeft && x + w > kLeft + plot_w) ++row, x = kLeft;
    legend_at.emplace_back(x, row);
    x += w;
  }
  const int legend_rows = legend.empty() ? 0 : row + 1;
  const int height = kTop + o.plot_height + kBelow + legend_rows * kLegendRow + 6;

  const auto [ya, yb] = padded(y_lo, y_hi, log);
  const Axis xa{x_lo, x_hi, false, static_cast<double>(kLeft), static_cast<double>(kLeft + plot_w)};
  const Axis yax{ya, yb, log, static_cast<double>(kTop + o.plot_height), static_cast<double>(kTop)};

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"" << o.width
      << "\" height=\"" << height << "\" viewBox=\"0 0 " << o.width << ' ' << height
      << "\" role=\"img\">\n<title>" << xml_escape(o.title) << "</title>\n";
  svg << "<text class=\"title\" x=\"" << kLeft << "\" y=\"18\">" << xml_escape(o.title);
  if (o.log_y && !log && n_points > 0)
    svg << "<tspan class=\"aside\"> — linear scale: a value is ≤ 0</tspan>";
  svg << "</text>\n";
  svg << "<rect class=\"plot-area\" x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << plot_w
      << "\" height=\"" << o.plot_height << "\" fill=\"" << kPlotAreaFill << "\"/>\n";

  // Grid lines and tick labels.
  const auto x_ticks = linear_ticks(x_lo, x_hi, 6);
  const double x_step = x_ticks.size() > 1 ? x_ticks[1] - x_ticks[0] : std::abs(x_lo);
  svg << "<g class=\"x-axis\">";
  for (const double t : x_ticks) {
    if (t < x_lo || t > x_hi) continue;
    const std::string p = px(xa.to_pixel(t));
    svg << "<line class=\"grid\" x1=\"" << p << "\" x2=\"" << p << "\" y1=\"" << kTop << "\" y2=\""
        << kTop + o.plot_height << "\" stroke=\"#e3e6ea\"/><text x=\"" << p << "\" y=\"" << kTop + o.plot_height + 14
        << "\" text-anchor=\"middle\">" << tick_label(t, x_step) << "</text>";
  }
  svg << "<text class=\"label\" x=\"" << kLeft + plot_w / 2 << "\" y=\"" << kTop + o.plot_height + 30
      << "\" text-anchor=\"middle\">" << xml_escape(o.x_label) << "</text></g>\n";
  const auto y_ticks = log ? log_ticks(ya, yb) : linear_ticks(ya, yb, 5);
  // A label needs the digits of the spacing of evenly spaced ticks (linear, or log_ticks'
  // round values within a decade), else of its own value (powers of ten, 1-2-5).
  const bool evenly_spaced = !log || (y_ticks.size() > 2 &&
                                      std::abs((y_ticks[1] - y_ticks[0]) - (y_ticks.back() - y_ticks[y_ticks.size() - 2])) <
                                          1e-9 * std::abs(y_ticks.back()));
  svg << "<g class=\"y-axis\">";
  double last_label = 1e9;  // pixel row of the label drawn last (ticks ascend: rows descend)
  for (const double t : y_ticks) {
    if (t < ya || t > yb) continue;
    if (last_label - yax.to_pixel(t) < 14) continue;  // too close to the one below (log's digits)
    last_label = yax.to_pixel(t);
    const std::string p = px(last_label);
    const double step = evenly_spaced && y_ticks.size() > 1 ? y_ticks[1] - y_ticks[0] : t;
    svg << "<line class=\"grid\" x1=\"" << kLeft << "\" x2=\"" << kLeft + plot_w << "\" y1=\"" << p
        << "\" y2=\"" << p << "\" stroke=\"#e3e6ea\"/><text x=\"" << kLeft - 5 << "\" y=\"" << p
        << "\" dy=\"0.32em\" text-anchor=\"end\">" << tick_label(t, step) << "</text>";
  }
  const int mid = kTop + o.plot_height / 2;
  svg << "<text class=\"label\" x=\"12\" y=\"" << mid << "\" text-anchor=\"middle\" transform=\"rotate(-90 12 "
      << mid << ")\">" << xml_escape(o.y_label + (log ? " (log)" : "")) << "</text></g>\n";
  svg << "<rect class=\"frame\" x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << plot_w
      << "\" height=\"" << o.plot_height << "\" fill=\"none\" stroke=\"#9aa0a6\"/>\n";

  if (n_points == 0)
    svg << "<text class=\"aside\" x=\"" << kLeft + plot_w / 2 << "\" y=\"" << mid
        << "\" text-anchor=\"middle\">no data</text>\n";
  for (const auto& s : series) {
    if (s.points.empty()) continue;
    const char* colour = kPalette[s.colour % kPaletteSize];
    const char* dash = kDashes[s.dash % 4];
    svg << "<polyline class=\"series\" data-colour=\"" << s.colour << "\" data-dash=\"" << s.dash
        << "\" stroke=\"" << colour << "\" fill=\"none\" stroke-width=\"1.6\" stroke-linejoin=\"round\"";
    if (*dash) svg << " stroke-dasharray=\"" << dash << '"';
    svg << " points=\"";
    for (size_t i = 0; i < s.points.size(); ++i)
      svg << (i ? " " : "") << px(xa.to_pixel(s.points[i].x)) << ',' << px(yax.to_pixel(s.points[i].y));
    svg << "\"/>\n";
    if (s.markers || s.points.size() == 1) {
      svg << "<g class=\"markers\" fill=\"" << colour << "\">";
      for (const auto& p : s.points)
        svg << "<circle cx=\"" << px(xa.to_pixel(p.x)) << "\" cy=\"" << px(yax.to_pixel(p.y)) << "\" r=\"2.5\"/>";
      svg << "</g>\n";
    }
  }

  svg << "<g class=\"legend\">";
  for (size_t i = 0; i < legend.size(); ++i) {
    const auto& e = legend[i];
    const int lx = legend_at[i].first;
    const int ly = kTop + o.plot_height + kBelow + legend_at[i].second * kLegendRow + 6;
    svg << "<line x1=\"" << lx << "\" x2=\"" << lx + 24 << "\" y1=\"" << ly << "\" y2=\"" << ly
        << "\" stroke=\"" << (e.colour.empty() ? "#555" : e.colour) << "\" stroke-width=\"2\"";
    if (e.colour.empty() && *kDashes[e.dash % 4]) svg << " stroke-dasharray=\"" << kDashes[e.dash % 4] << '"';
    svg << "/><text x=\"" << lx + 30 << "\" y=\"" << ly << "\" dy=\"0.32em\">" << xml_escape(e.label)
        << "</text>";
  }
  svg << "</g>\n</svg>\n";
  return svg.str();
}

}  // namespace kiln::observe
