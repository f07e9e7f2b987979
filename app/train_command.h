// `kiln train`: from a parsed config to a finished run directory.
#pragma once
#include <string>
#include <vector>

namespace kiln::app {

struct TrainCommand {
  std::string config_path;          // empty: the default config
  std::vector<std::string> overrides;  // "section.key=value"
  std::string run_dir;              // empty: run.dir/run.name
  std::string resume_dir;           // non-empty: continue that run
  bool print_config = false;        // print the resolved config and stop
};

/// Runs the command; returns the process exit code. Bad input throws
/// kiln::InputError (exit code 2 in main).
int run_train(const TrainCommand& command);

/// The config used when none is named: configs/fashion_mlp.toml in the current
/// directory, else the one in kiln's source tree.
std::string default_config_path();

}  // namespace kiln::app
