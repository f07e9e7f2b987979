// `kiln sample`: text from a trained GPT checkpoint, with the vocabulary and model
// the checkpoint itself records (its config.toml and data.json).
#pragma once
#include <cstdint>
#include <string>

namespace kiln::app {

struct SampleCommand {
  std::string checkpoint;  // a checkpoint directory, or a run directory (its newest checkpoint)
  bool best = false;       // the run directory's best checkpoint (checkpoint.best), not its newest
  std::string prompt;      // the text to continue; empty: a newline (the start of a line)
  int64_t tokens = 200;
  double temperature = 0.8;
  int64_t top_k = 0;
  uint64_t seed = 0;
  bool cache = true;       // false: recompute the whole context per token (for comparison)
  std::string device = "cpu";
  int64_t threads = 0;     // 0: libtorch's default
};

/// Writes the prompt and its continuation to stdout and the speed to stderr.
/// Returns the exit code; bad input (checkpoint, prompt, options) throws kiln::InputError.
/// Example: run_sample({"runs/gpt_char", "Q: ", 300});
int run_sample(const SampleCommand& command);

/// `kiln sample ARGS…` (argv[0] is "sample"): parses the options and runs the command.
int sample_main(int argc, char** argv);

}  // namespace kiln::app
