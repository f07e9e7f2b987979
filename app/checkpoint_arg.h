// The CHECKPOINT argument of kiln export and kiln sample: a checkpoint directory, a run
// directory (its newest checkpoint), or with --best the run's best checkpoint.
#pragma once
#include <string>

namespace kiln::app {

struct CheckpointChoice {
  std::string dir;  // the checkpoint directory
  std::string why;  // --best: "the best test_accuracy (0.8312) of 3 checkpoints"; else ""
};

/// `best` = false: train::resolve_checkpoint(arg). `best` = true: `arg` must be a run
/// directory; its checkpoints are ranked by the run's checkpoint.best metric (its
/// config.toml; "auto": the task's first test metric, from data.json) as their
/// manifests record it, better meaning higher for accuracy and R², lower for loss,
/// RMSE and bits. Anything that leaves no choice (a checkpoint directory, a run that
/// ranked none, no checkpoint with the metric) throws kiln::InputError saying so.
/// Example: const auto c = checkpoint_argument("runs/fashion_mlp", true);
CheckpointChoice checkpoint_argument(const std::string& arg, bool best);

}  // namespace kiln::app
