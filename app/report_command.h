// `kiln report`: one self-contained HTML page of a run's curves (or several runs'
// overlaid), its final metrics and its config, from what the run directory holds.
#pragma once
#include <string>
#include <vector>

namespace kiln::app {

struct ReportCommand {
  std::vector<std::string> runs;  // run directories (each with metrics.jsonl), one colour each
  std::string out;                // the HTML file; "" = RUN/report.html, for one run only
};

/// Reads every run first (bad input throws kiln::InputError before anything is written),
/// then writes the page under a temporary name beside `out` and renames it into place.
/// An existing `out` is replaced only when it is an earlier report. Prints the path
/// written and the runs' warnings (a skipped last line). Returns the exit code.
/// Example: run_report({{"runs/a", "runs/b"}, "compare.html"});
int run_report(const ReportCommand& command);

/// `kiln report ARGS…` (argv[0] is "report"): parses the options and runs the command.
int report_main(int argc, char** argv);

}  // namespace kiln::app
