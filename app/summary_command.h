// `kiln summary`: the model a config builds — every module with its output shape and
// parameters — and the memory a training step at its batch size would take, without
// training or writing anything. `kiln train --dry-run` prints the same.
#pragma once
#include <string>
#include <vector>

namespace kiln::train {
struct RunSpec;
}

namespace kiln::app {

struct SummaryCommand {
  std::string config_path;             // empty: the default config
  std::vector<std::string> overrides;  // "section.key=value"
};

/// Resolves the config as `kiln train` does and prints the summary. Returns the exit
/// code; bad input throws kiln::InputError (exit code 2 in main).
/// Example: run_summary({"configs/gpt_char.toml", {"train.batch_size=64"}});
int run_summary(const SummaryCommand& command);

/// Prints the summary of the run `spec` describes (train::summarize) under a heading
/// line, to stdout. Example: print_summary(to_run_spec(config), "kiln summary: configs/tiny.toml");
void print_summary(const train::RunSpec& spec, const std::string& heading);

/// `kiln summary ARGS…` (argv[0] is "summary"): parses the options and runs the command.
int summary_main(int argc, char** argv);

}  // namespace kiln::app
