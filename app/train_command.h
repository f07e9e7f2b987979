// `kiln train`: from a parsed config to a finished run directory.
#pragma once
#include <string>
#include <vector>

namespace kiln::train {
struct RunSpec;
}

namespace kiln::app {

struct Config;

struct TrainCommand {
  std::string config_path;          // empty: the default config
  std::vector<std::string> overrides;  // "section.key=value"
  std::string run_dir;              // empty: run.dir/run.name
  std::string resume_dir;           // non-empty: continue that run
  bool print_config = false;        // print the resolved config and stop
  bool quiet = false;               // print the result only
  std::string log_format = "text";  // text or json (one JSON object per line)
  bool dry_run = false;             // print the summary and the run directory, write nothing
};

/// Runs the command; returns the process exit code. Bad input throws
/// kiln::InputError (exit code 2 in main).
int run_train(const TrainCommand& command);

/// The typed options a config stands for (data, model, optimizer, schedule,
/// training, checkpoints, memory), without the run's directories.
/// Example: const auto spec = to_run_spec(load_config("configs/gpt_char.toml"));
train::RunSpec to_run_spec(const Config& config);

/// The config `kiln train CONFIG --set …` trains: the file (empty: the default), the
/// overrides applied, validated, data paths made absolute and train.device checked.
/// Bad input throws kiln::InputError. Example: auto c = resolve_config("configs/tiny.toml", {"train.epochs=1"});
Config resolve_config(const std::string& config_path, const std::vector<std::string>& overrides);

/// The config used when none is named: configs/fashion_mlp.toml in the current
/// directory, else the one in kiln's source tree.
std::string default_config_path();

}  // namespace kiln::app
