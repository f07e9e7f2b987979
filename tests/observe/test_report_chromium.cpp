// kiln report's page as a browser draws it: headless Chromium (Debian's chromium)
// takes a screenshot, whose plot areas must show each run's colour where the run has a
// line and nowhere else, and serialises the DOM, whose polylines must hold the points
// written. Reported as skipped without chromium, never as a silent pass.
#include <zlib.h>

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "observe/report.h"
#include "observe_support.h"
#include "support.h"
#include "util/files.h"

using namespace kiln::observe;
namespace fs = std::filesystem;

namespace {

// An 8-bit RGB image, row by row.
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  const uint8_t* at(int x, int y) const { return &rgb[3 * (static_cast<size_t>(y) * width + x)]; }
};

uint32_t big_endian(const std::string& s, size_t at) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data() + at);
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// A PNG as Chromium writes a screenshot: 8-bit RGB or RGBA, not interlaced; the five
// row filters of the PNG specification (section 9) undone.
Image decode_png(const std::string& png) {
  REQUIRE(png.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  Image img;
  int channels = 0;
  std::string idat;
  for (size_t at = 8; at + 8 <= png.size();) {
    const uint32_t length = big_endian(png, at);
    const std::string type = png.substr(at + 4, 4);
    if (type == "IHDR") {
      img.width = static_cast<int>(big_endian(png, at + 8));
      img.height = static_cast<int>(big_endian(png, at + 12));
      const int depth = static_cast<uint8_t>(png[at + 16]), colour = static_cast<uint8_t>(png[at + 17]);
      const int interlace = static_cast<uint8_t>(png[at + 20]);
      INFO("bit depth " << depth << ", colour type " << colour << ", interlace " << interlace);
      REQUIRE((depth == 8 && (colour == 2 || colour == 6) && interlace == 0));
      channels = colour == 6 ? 4 : 3;
    } else if (type == "IDAT") {
      idat += png.substr(at + 8, length);
    }
    at += 12 + length;
  }
  const size_t stride = static_cast<size_t>(img.width) * channels;
  std::vector<uint8_t> raw(static_cast<size_t>(img.height) * (stride + 1));
  uLongf raw_size = raw.size();
  REQUIRE(uncompress(raw.data(), &raw_size, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) == Z_OK);
  REQUIRE(raw_size == raw.size());
  std::vector<uint8_t> prev(stride, 0), row(stride);
  img.rgb.resize(static_cast<size_t>(img.width) * img.height * 3);
  for (int y = 0; y < img.height; ++y) {
    const uint8_t* in = &raw[y * (stride + 1)];
    const int filter = in[0];
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= static_cast<size_t>(channels) ? row[i - channels] : 0, b = prev[i],
                c = i >= static_cast<size_t>(channels) ? prev[i - channels] : 0;
      int predicted = 0;
      switch (filter) {
        case 0: break;
        case 1: predicted = a; break;
        case 2: predicted = b; break;
        case 3: predicted = (a + b) / 2; break;
        case 4: {  // Paeth
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          predicted = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default: FAIL("PNG row " << y << ": filter type " << filter);
      }
      row[i] = static_cast<uint8_t>(in[1 + i] + predicted);
    }
    for (int x = 0; x < img.width; ++x)
      std::memcpy(&img.rgb[3 * (static_cast<size_t>(y) * img.width + x)], &row[static_cast<size_t>(x) * channels], 3);
    std::swap(prev, row);
  }
  return img;
}

// Runs of indices whose count reaches `min_count`, gaps of up to 4 (a grid line) bridged,
// at least `min_length` long: where the plot areas are along one axis.
std::vector<std::pair<int, int>> bands(const std::vector<int>& counts, int min_count, int min_length) {
  std::vector<std::pair<int, int>> out;
  int start = -1, last = -1;
  for (int i = 0; i < static_cast<int>(counts.size()); ++i) {
    if (counts[i] < min_count) continue;
    if (start >= 0 && i - last > 5) {  // a real gap: the band before it ends
      if (last - start + 1 >= min_length) out.emplace_back(start, last);
      start = -1;
    }
    if (start < 0) start = i;
    last = i;
  }
  if (start >= 0 && last - start + 1 >= min_length) out.emplace_back(start, last);
  return out;
}

std::array<int, 3> rgb_of(const char* hex) {
  const unsigned v = static_cast<unsigned>(std::strtoul(hex + 1, nullptr, 16));
  return {static_cast<int>(v >> 16), static_cast<int>((v >> 8) & 255), static_cast<int>(v & 255)};
}

// Whether `p` is `colour` laid over `background` at 35 % coverage or more: a line's
// pixel, antialiased (a flat line between two pixel rows covers neither wholly).
bool tinted(const uint8_t* p, const std::array<int, 3>& colour, const std::array<int, 3>& background) {
  double dot = 0, norm = 0;
  for (int k = 0; k < 3; ++k) {
    dot += (p[k] - background[k]) * static_cast<double>(colour[k] - background[k]);
    norm += static_cast<double>(colour[k] - background[k]) * (colour[k] - background[k]);
  }
  const double alpha = dot / norm;
  double residual = 0;
  for (int k = 0; k < 3; ++k) residual += std::abs(p[k] - (background[k] + alpha * (colour[k] - background[k])));
  return alpha >= 0.35 && residual <= 24;
}

// `command` under `timeout`, its output to `log`; the seconds its last try took. A
// headless Chromium now and then hangs on a loaded 2-core machine (ctest -j2: once in a
// full suite, killed by `timeout` after 120 s, where it takes 4 s alone), so a try that
// timed out (exit 124) is made once more, with a profile of its own (the hung one's
// may still be locked); any other failure fails at once.
double run_timed(const std::string& base, const std::string& args, const std::string& log) {
  int rc = 0;
  double seconds = 0;
  std::string command;
  for (int attempt = 1; attempt <= 2; ++attempt) {
    command = base + std::to_string(attempt) + " " + args;
    const auto start = std::chrono::steady_clock::now();
    rc = std::system((command + " >" + log + " 2>" + log + ".err").c_str());
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 124) break;
    std::printf("chromium timed out after %.0f s (try %d): %s\n", seconds, attempt, command.c_str());
  }
  INFO(command << "\n" << kiln::files::read(log + ".err"));
  REQUIRE(rc == 0);
  return seconds;
}

}  // namespace

TEST_CASE("headless Chromium draws every chart of a two-run report with the points written",
          "[observe][report][chromium]") {
  if (std::system("command -v chromium >/dev/null 2>&1") != 0) {
    kiln::test::skip("no chromium on PATH (scripts/setup installs Debian's chromium)");
    return;
  }
  kiln::test::TempDir dir;
  const std::vector<std::tuple<std::string, int, int, int, double>> made = {{"a", 60, 6, 5, 0.0},
                                                                            {"b", 40, 4, 0, 0.5}};
  std::vector<RunLog> runs;
  for (const auto& [name, train, test, memory, shift] : made) {
    fs::create_directories(dir / name);
    kiln::test::write_file(dir / (name + "/metrics.jsonl"), kiln::test::metrics_lines(train, test, shift));
    if (memory) kiln::test::write_file(dir / (name + "/memory.jsonl"), kiln::test::memory_lines(memory));
    runs.push_back(read_run(dir / name));
  }
  const std::string html = render_report(runs);
  kiln::test::write_file(dir / "report.html", html);
  const auto charts = kiln::test::charts(html);
  REQUIRE(charts.size() == 8);

  // Chromium's profile in the temporary directory; each run bounded by a timeout.
  const std::string chromium = "timeout -k 5 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars "
                               "--no-first-run --user-data-dir=" + dir / "profile";
  const std::string page = "file://" + dir / "report.html";
  const double dom_s = run_timed(chromium, "--dump-dom " + page, dir / "dom.html");
  const double shot_s =
      run_timed(chromium, "--screenshot=" + dir / "shot.png" + " --window-size=1400,3000 " + page, dir / "shot.log");
  std::printf("chromium: --dump-dom %.1f s, --screenshot %.1f s\n", dom_s, shot_s);

  // The DOM holds every polyline with its points, as written: the loss chart's first.
  const auto written = kiln::test::polylines(html);
  const auto drawn = kiln::test::polylines(kiln::files::read(dir / "dom.html"));
  REQUIRE(drawn.size() == written.size());
  for (size_t i = 0; i < written.size(); ++i) {
    INFO("polyline " << i);
    REQUIRE(drawn[i].colour == written[i].colour);
    REQUIRE(drawn[i].dash == written[i].dash);
    REQUIRE(drawn[i].points == written[i].points);
  }
  REQUIRE(drawn.size() >= 4);
  REQUIRE(drawn[0].points == 60);  // a's train loss
  REQUIRE(drawn[1].points == 6);   // a's test loss
  REQUIRE(drawn[2].points == 40);  // b's train loss
  REQUIRE(drawn[3].points == 4);   // b's test loss

  // The screenshot: find the plot areas by their fill — the columns they stand in, then
  // in each column the rows they span — and order them as the page does, row by row.
  const Image img = decode_png(kiln::files::read(dir / "shot.png"));
  REQUIRE(img.width == 1400);
  const auto fill = rgb_of(kPlotAreaFill);
  const auto filled = [&](int x, int y) {
    const uint8_t* p = img.at(x, y);
    return p[0] == fill[0] && p[1] == fill[1] && p[2] == fill[2];
  };
  std::vector<int> per_column(img.width, 0);
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) per_column[x] += filled(x, y);
  struct Area {
    int x0, x1, y0, y1;
  };
  std::vector<Area> areas;
  for (const auto& [x0, x1] : bands(per_column, 20, 100)) {
    std::vector<int> per_row(img.height, 0);
    for (int y = 0; y < img.height; ++y)
      for (int x = x0; x <= x1; ++x) per_row[y] += filled(x, y);
    for (const auto& [y0, y1] : bands(per_row, 1, 100)) {
      int n = 0;
      for (int y = y0; y <= y1; ++y)
        for (int x = x0; x <= x1; ++x) n += filled(x, y);
      if (n * 2 > (x1 - x0 + 1) * (y1 - y0 + 1)) areas.push_back({x0, x1, y0, y1});
    }
  }
  std::sort(areas.begin(), areas.end(), [](const Area& a, const Area& b) {
    return std::abs(a.y0 - b.y0) > 5 ? a.y0 < b.y0 : a.x0 < b.x0;
  });
  REQUIRE(areas.size() == charts.size());  // every chart drawn, none lost
  for (size_t c = 0; c < charts.size(); ++c) {
    const auto lines = kiln::test::polylines(charts[c]);
    for (int run = 0; run < 2; ++run) {
      const auto colour = rgb_of(kPalette[run]);
      int pixels = 0;
      for (int y = areas[c].y0; y <= areas[c].y1; ++y)
        for (int x = areas[c].x0; x <= areas[c].x1; ++x) pixels += tinted(img.at(x, y), colour, fill);
      const bool has_line = std::any_of(lines.begin(), lines.end(), [&](const auto& l) { return l.colour == run; });
      INFO("chart " << c << " (" << charts[c].substr(charts[c].find("<title>") + 7, 20) << "…), run " << run
                    << ": " << pixels << " pixels of its colour in the plot area x " << areas[c].x0 << ".."
                    << areas[c].x1 << ", y " << areas[c].y0 << ".." << areas[c].y1);
      if (has_line) REQUIRE(pixels >= 50);
      else REQUIRE(pixels <= 3);
    }
  }
}
