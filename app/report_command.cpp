// run_report(): reads the runs (lib/observe/run_log.h), renders the page
// (lib/observe/report.h) and writes it where it may.
#define CXXOPTS_VECTOR_DELIMITER '\0'  // as main.cpp: a run directory may contain commas
#include "report_command.h"

#include <c10/util/StringUtil.h>
#include <cxxopts.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "observe/report.h"
#include "util/error.h"
#include "util/files.h"

namespace kiln::app {
namespace fs = std::filesystem;
namespace {

constexpr const char* kDefaultName = "report.html";

// Where the page goes, checked before anything is written: a file in an existing
// directory that is absent or an earlier report.
fs::path checked_out(const ReportCommand& cmd) {
  if (cmd.out.empty() && cmd.runs.size() > 1)
    throw InputError(c10::str("-o: expected the file to write the report of ", cmd.runs.size(),
                              " runs to, found none (only a single run's report goes into its "
                              "directory, as RUN_DIR/", kDefaultName, ")"));
  const fs::path out = cmd.out.empty() ? fs::path(cmd.runs.front()) / kDefaultName : fs::path(cmd.out);
  const fs::path parent = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  if (out.filename().empty() || fs::is_directory(out))
    throw InputError(c10::str(out.string(), ": -o: expected a file to write, found a directory"));
  if (!fs::is_directory(parent))
    throw InputError(c10::str(out.string(), ": -o: expected an existing directory to write into, found no ",
                              parent.string()));
  if (fs::exists(fs::symlink_status(out))) {
    std::ifstream in(out, std::ios::binary);
    std::string head(4096, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(in.gcount()));
    if (!fs::is_regular_file(out) || head.find(observe::kReportMarker) == std::string::npos)
      throw InputError(c10::str(out.string(), ": -o: already exists and is not a kiln report; "
                                "kiln report replaces only an earlier report (remove it, or choose another -o)"));
  }
  return out;
}

}  // namespace

int run_report(const ReportCommand& cmd) {
  if (cmd.runs.empty())
    throw InputError("RUN_DIR: expected a run directory, found none (see kiln report --help)");
  std::vector<observe::RunLog> runs;
  for (const auto& dir : cmd.runs) runs.push_back(observe::read_run(dir));
  const fs::path out = checked_out(cmd);
  const std::string html = observe::render_report(runs);
  try {
    files::replace_synced(out.string(), html);
  } catch (const std::exception& e) {
    throw InputError(c10::str(out.string(), ": -o: cannot write the report: ", e.what()));
  }
  for (const auto& r : runs)
    for (const auto& w : r.warnings) std::fprintf(stderr, "kiln: warning: %s\n", w.c_str());
  size_t charts = 0;
  for (size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) ++charts;
  std::printf("wrote %s (%zu run%s, %zu charts, %.1f KB)\n", out.c_str(), runs.size(),
              runs.size() == 1 ? "" : "s", charts, static_cast<double>(html.size()) / 1024.0);
  return 0;
}

int report_main(int argc, char** argv) {
  cxxopts::Options options("kiln report",
                           "Write one self-contained HTML page (inline SVG, no script, nothing fetched) "
                           "of runs' curves, final metrics and configs; several runs are overlaid, "
                           "one colour each.");
  options.custom_help("RUN_DIR [RUN_DIR ...] [-o FILE]");
  options.positional_help("");
  options.add_options()
      ("runs", "run directories (each with metrics.jsonl)", cxxopts::value<std::vector<std::string>>())
      ("o,out", c10::str("the HTML file to write (default: RUN_DIR/", kDefaultName,
                         " for one run; required for several)"),
       cxxopts::value<std::string>())
      ("h,help", "show this help");
  options.parse_positional({"runs"});
  ReportCommand cmd;
  try {
    const auto args = options.parse(argc, argv);
    if (args.count("help")) {
      std::cout << options.help()
                << "\nCharts over steps: train and test loss, each test metric (accuracy, bits per "
                   "character,\nRMSE, R²), learning rate, gradient norm, skipped steps (fp16, when any), "
                   "samples/s and\ntokens/s, memory (MiB). Loss and gradient norm on a log scale. At most "
                << observe::kMaxPointsPerLine
                << " points a line\n(the lowest and highest of each stretch of steps). An existing FILE is "
                   "replaced only\nwhen it is an earlier report. Nothing else in a run directory is "
                   "written.\n";
      return 0;
    }
    if (args.count("runs")) cmd.runs = args["runs"].as<std::vector<std::string>>();
    if (args.count("out")) cmd.out = args["out"].as<std::string>();
  } catch (const cxxopts::exceptions::exception& e) {
    throw InputError(c10::str(e.what(), " (see kiln report --help)"));
  }
  return run_report(cmd);
}

}  // namespace kiln::app
