// `kiln export`: a checkpoint's weights (and the data description they depend on)
// written as safetensors, .npy files or a .pt file that NumPy and PyTorch read.
#pragma once
#include <string>

namespace kiln::app {

struct ExportCommand {
  std::string checkpoint;  // a checkpoint directory, or a run directory (its newest checkpoint)
  std::string format;      // safetensors | npy | torch
  std::string out;         // the file (safetensors, torch) or directory (npy) to create
  bool force = false;      // replace an existing `out` (an earlier export of the same format)
  bool best = false;       // the run directory's best checkpoint (checkpoint.best), not its newest
};

/// Verifies the checkpoint (manifest sizes and CRC-32s), then writes its tensors to
/// `out` under a temporary name and renames it into place, so `out` is whole or
/// absent. Returns the exit code; bad input throws kiln::InputError (exit code 2).
/// Example: run_export({"runs/x", "torch", "model.pt"});
int run_export(const ExportCommand& command);

/// `kiln export ARGS…` (argv[0] is "export"): parses the options and runs the command.
int export_main(int argc, char** argv);

}  // namespace kiln::app
