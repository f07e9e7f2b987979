// SVG charts (observe/svg_plot.h): ticks and their labels, one polyline per series
// with one coordinate pair per point, log axes and their fallback, downsampling.
#include <cmath>
#include <regex>

#include "observe/svg_plot.h"
#include "observe_support.h"
#include "support.h"

using namespace kiln::observe;
using Catch::Matchers::Contains;

TEST_CASE("linear ticks are round values 1, 2 or 5 x 10^k apart covering the range", "[observe]") {
  REQUIRE(linear_ticks(0, 1, 5) == std::vector<double>{0, 0.2, 0.4, 0.6, 0.8, 1.0});
  REQUIRE(linear_ticks(3, 471, 6) == std::vector<double>{100, 200, 300, 400});
  const auto t = linear_ticks(-0.5, 0.5, 4);
  REQUIRE(t == std::vector<double>{-0.5, 0, 0.5});
  REQUIRE(std::find(t.begin(), t.end(), 0.0) != t.end());
  REQUIRE(std::signbit(*std::find(t.begin(), t.end(), 0.0)) == false);  // "0", never "-0"
}

TEST_CASE("log ticks are powers of ten, with 2 and 5 (or every digit) within a decade or two", "[observe]") {
  REQUIRE(log_ticks(1e-3, 1e3).size() == 7);
  const auto t = log_ticks(0.3, 2.3);
  REQUIRE(t.size() == 3);
  REQUIRE(t[0] == Approx(0.5));
  REQUIRE(t[1] == Approx(1));
  REQUIRE(t[2] == Approx(2));
  REQUIRE(log_ticks(1e-12, 1e12).size() <= 13);  // every other power of ten
}

TEST_CASE("tick labels carry the digits of the spacing, k and M for thousands", "[observe]") {
  REQUIRE(tick_label(0, 5) == "0");
  REQUIRE(tick_label(45000, 5000) == "45k");
  REQUIRE(tick_label(12500, 500) == "12.5k");
  REQUIRE(tick_label(3e6, 1e6) == "3M");
  REQUIRE(tick_label(0.25, 0.05) == "0.25");
  REQUIRE(tick_label(1.36565, 0.00005) == "1.36565");
  REQUIRE(tick_label(1.3656, 0.00005) == "1.36560");  // the same decimals on one axis
  REQUIRE(tick_label(2e-5, 1e-5) == "2e-05");
  REQUIRE(tick_label(300, 100) == "300");
}

TEST_CASE("a chart draws one polyline per series with one x,y pair per point", "[observe]") {
  std::vector<Series> series = {{"a", 0, 0, false, {{1, 2.0}, {2, 1.0}, {3, 0.5}}},
                                {"a", 0, 1, true, {{2, 1.5}, {4, 1.2}}},
                                {"b", 1, 0, false, {{1, 3.0}, {2, 2.0}, {3, 1.0}, {4, 0.7}, {5, 0.6}}}};
  ChartOptions o;
  o.title = "loss <train & test>";
  o.y_label = "loss";
  o.log_y = true;
  o.dash_names = {"train", "test"};
  const std::string svg = render_chart(o, series);
  const auto lines = kiln::test::polylines(svg);
  REQUIRE(lines.size() == 3);
  REQUIRE(lines[0].colour == 0);
  REQUIRE(lines[0].dash == 0);
  REQUIRE(lines[0].points == 3);
  REQUIRE(lines[1].dash == 1);
  REQUIRE(lines[1].points == 2);
  REQUIRE(lines[2].colour == 1);
  REQUIRE(lines[2].points == 5);
  REQUIRE_THAT(svg, Contains("stroke=\"#4e79a7\""));  // kPalette[0]
  REQUIRE_THAT(svg, Contains("stroke=\"#f28e2b\""));  // kPalette[1]
  REQUIRE_THAT(svg, Contains("loss &lt;train &amp; test&gt;"));  // escaped
  REQUIRE_THAT(svg, Contains("loss (log)"));
  REQUIRE_THAT(svg, Contains(">train</text>"));  // the dash legend
  REQUIRE_THAT(svg, Contains(">test</text>"));
  // Markers on the sparse series only: two circles.
  const std::regex circle("<circle");
  REQUIRE(std::distance(std::sregex_iterator(svg.begin(), svg.end(), circle), std::sregex_iterator()) == 2);
  // Every coordinate is inside the plot area (x 66..624, y 30..250 at the defaults).
  const std::regex pair("(-?[0-9.]+),(-?[0-9.]+)");
  for (std::sregex_iterator m(svg.begin(), svg.end(), pair), end; m != end; ++m) {
    const double x = std::stod((*m)[1]), y = std::stod((*m)[2]);
    REQUIRE(x >= 66 - 1e-9);
    REQUIRE(x <= 624 + 1e-9);
    REQUIRE(y >= 30 - 1e-9);
    REQUIRE(y <= 250 + 1e-9);
  }
}

TEST_CASE("a log chart with a value <= 0 is drawn linear and says so, an empty one says no data", "[observe]") {
  ChartOptions o;
  o.title = "loss";
  o.log_y = true;
  const auto svg = render_chart(o, {{"a", 0, 0, false, {{1, 1.0}, {2, 0.0}}}});
  REQUIRE_THAT(svg, Contains("linear scale: a value is ≤ 0"));
  REQUIRE_THAT(svg, !Contains("(log)"));
  const auto empty = render_chart(o, {});
  REQUIRE_THAT(empty, Contains("no data"));
  REQUIRE(kiln::test::polylines(empty).empty());
  // A lone point gets a marker, since a one-point polyline draws nothing.
  const auto lone = render_chart(o, {{"a", 0, 0, false, {{5, 1.0}}}});
  REQUIRE(kiln::test::polylines(lone).at(0).points == 1);
  REQUIRE_THAT(lone, Contains("<circle"));
}

TEST_CASE("downsampling keeps the first, the last and each stretch's lowest and highest point", "[observe]") {
  std::vector<Point> points;
  for (int i = 0; i < 100000; ++i) points.push_back({static_cast<double>(i), std::sin(i * 0.001) + (i == 54321 ? 5 : 0)});
  const auto kept = downsample_min_max(points, 2000);
  REQUIRE(kept.size() <= 2000);
  REQUIRE(kept.size() >= 1990);
  REQUIRE(kept.front().x == 0);
  REQUIRE(kept.back().x == 99999);
  REQUIRE(std::is_sorted(kept.begin(), kept.end(), [](const Point& a, const Point& b) { return a.x < b.x; }));
  // The spike and the curve's extremes survive.
  const auto [lo, hi] = std::minmax_element(kept.begin(), kept.end(), [](const Point& a, const Point& b) { return a.y < b.y; });
  REQUIRE(hi->x == 54321);
  REQUIRE(lo->y == Approx(-1).margin(1e-6));
  // Short lines are left alone.
  const std::vector<Point> few = {{0, 1}, {1, 2}, {2, 3}};
  REQUIRE(downsample_min_max(few, 2000).size() == 3);
}
