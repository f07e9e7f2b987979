// `kiln report`'s page: runs read by read_run() drawn as one self-contained HTML file
// — charts over steps as inline SVG, the final metrics, the configs — that any browser
// opens offline: no script, no font, style sheet or image from anywhere else.
#pragma once
#include <string>
#include <vector>

#include "observe/run_log.h"

namespace kiln::observe {

/// The most points a line is drawn with; a longer one is downsampled (downsample_min_max)
/// and the page says so.
inline constexpr size_t kMaxPointsPerLine = 2000;

/// Every page render_report() writes holds this in its <head>: `kiln report` replaces
/// an existing file only when it holds it too (an earlier report), never another file.
inline constexpr const char* kReportMarker = "<meta name=\"generator\" content=\"kiln report\">";

/// The page for `runs`, run i drawn in kPalette[i]: train and test loss, each test
/// metric, learning rate, gradient norm, loss scale and skipped steps (when any),
/// throughput, memory; the final metrics (last test line) in a table, per class and per
/// depth when the run has them; the config of each run, and the keys that differ.
/// Example: const std::string html = render_report({read_run("runs/a"), read_run("runs/b")});
std::string render_report(const std::vector<RunLog>& runs);

}  // namespace kiln::observe
