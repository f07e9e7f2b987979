// Line charts written as inline SVG text, for `kiln report`: axes with tick labels,
// linear or log y, one colour per run and one dash per kind of line, a legend.
//
// kiln's own rather than a library's: Debian ships no C++ library that writes SVG
// charts (matplot++ and sciplot are not packaged and drive gnuplot at run time);
// PLplot (libplplot-dev) has an SVG driver, but it is a C library with process-global
// stream state that splits and scales each line itself and names system fonts — we
// want one <polyline> per series whose points a test can count, styling from the
// page's CSS, and no new dependency for a few hundred lines.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::observe {

struct Point {
  double x, y;
};

/// The colours of runs, in order (Tableau 10: distinct in colour-blind simulations).
/// Run i gets kPalette[i % size]; the report says so when runs outnumber it.
inline constexpr const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                           "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
inline constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

/// The fill of every chart's plot area: a colour nothing else on the page has, so a
/// screenshot's plot areas can be found by it (tests/observe/test_report_chromium.cpp).
inline constexpr const char* kPlotAreaFill = "#fafbfc";

/// One line of a chart. Example: Series{"runs/a", 0, 1, true, {{40, 0.67}, {80, 0.55}}}
struct Series {
  std::string label;          // the legend's text for its colour (a run's name)
  int colour = 0;             // kPalette index (a run)
  int dash = 0;               // 0 solid, 1 dashed, 2 dotted, 3 dash-dot: what the line is
  bool markers = false;       // a dot at each point too (sparse lines; a lone point always gets one)
  std::vector<Point> points;  // finite, in increasing x
};

struct ChartOptions {
  std::string title;
  std::string x_label = "step";
  std::string y_label;
  bool log_y = false;  // asked for; linear when a value is <= 0 (the chart says so)
  bool include_zero = false;  // linear y: the axis reaches 0 (sizes, rates: a flat line stays flat)
  std::optional<std::pair<double, double>> x_domain;  // shared by a report's charts; else the data's
  std::vector<std::string> dash_names;  // the legend's name of each dash index (none: no dash legend)
  int width = 640;
  int plot_height = 220;  // the plot area; axes, title and legend add to it
};

/// The chart as an <svg> element (no script, no external reference). Each series is one
/// <polyline class="series" data-colour="C" data-dash="D" points="x,y x,y …"> with
/// one x,y pair per point, its markers a <g class="markers"> of <circle>s; a chart
/// without points says "no data". Example: std::string svg = render_chart({"loss"}, series);
std::string render_chart(const ChartOptions& options, const std::vector<Series>& series);

/// At most `max_points` of `points` (sorted by x) that keep the line's shape: the first
/// and last point, and in each of (max_points - 2) / 2 equal runs of points its lowest
/// and highest, in x order. Fewer points come back unchanged.
/// Example: auto shown = downsample_min_max(points, 2000);
std::vector<Point> downsample_min_max(const std::vector<Point>& points, size_t max_points);

/// Tick positions for [lo, hi]: about `target` round values (1, 2 or 5 × 10^k apart)
/// covering the range on a linear axis; on a log axis (lo > 0) the powers of ten in it,
/// with 2 and 5 × 10^k (then 3, then every digit) when they are too few. A chart skips a
/// tick that would crowd the one below it.
std::vector<double> linear_ticks(double lo, double hi, int target = 6);
std::vector<double> log_ticks(double lo, double hi);

/// A tick label: the decimals the spacing `step` needs, thousands as k and M
/// (45000 → "45k"), numbers below 0.001 in exponent form ("2e-05").
std::string tick_label(double value, double step);

/// Text with &, <, >, " and ' escaped for HTML and SVG. Example: xml_escape("a<b") == "a&lt;b"
std::string xml_escape(const std::string& text);

}  // namespace kiln::observe
