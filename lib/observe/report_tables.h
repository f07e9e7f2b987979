// The tables of `kiln report`'s page (report.cpp draws the charts): the runs, their
// final metrics, accuracy per class and per depth, and their configs with the keys
// in which they differ. Each returns HTML; runs are named by run_labels().
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "observe/run_log.h"

namespace kiln::observe {

/// Each run's name in the page: its directory's name, or the directory as given when
/// two runs share a name. Example: run_labels(runs)[0] == "fashion_mlp"
std::vector<std::string> run_labels(const std::vector<RunLog>& runs);

/// Colour, name, directory, last step and the lines each file holds, a row per run.
std::string runs_table(const std::vector<RunLog>& runs, const std::vector<std::string>& labels);

/// The last test line of each run (step, epoch, loss, each metric, train loss,
/// samples/s, elapsed); accuracy in percent.
std::string final_metrics_table(const std::vector<RunLog>& runs, const std::vector<std::string>& labels);

/// Accuracy by class (a class per row, a run per column) and by depth (a dynamic_mlp's
/// per_depth), from the last test lines that hold them; "" when none does.
std::string per_class_tables(const std::vector<RunLog>& runs, const std::vector<std::string>& labels);

/// "section.key" → value of each assignment in a config.toml as kiln writes it (one
/// key per line, `# comment` after it; commented-out keys are unset and left out).
/// Example: config_entries("[train]\nepochs = 2  # passes\n") == {{"train.epochs", "2"}}
std::vector<std::pair<std::string, std::string>> config_entries(const std::string& toml);

/// With several runs, the keys whose values differ between them; then each run's
/// config.toml as it is (open when there is one run).
std::string config_section(const std::vector<RunLog>& runs, const std::vector<std::string>& labels);

}  // namespace kiln::observe
