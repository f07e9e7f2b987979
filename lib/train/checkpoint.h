// Checkpoints of a training run: one directory per saved step under
// RUN/checkpoints/, written beside and renamed into place, so a crash leaves the
// old checkpoint or the new one, never half of one.
#pragma once
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <optional>
#include <string>

namespace kiln::train {

/// Where training stands: `step` optimizer steps done; the next batch to train
/// is batch `batch` of epoch `epoch` (both 0-based).
struct TrainPosition {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t batch = 0;
};

/// Writes RUN/checkpoints/step_<N>/{model.pt, optimizer.pt, trainer.pt, config.toml}
/// and returns that directory. Example: save_checkpoint(run, pos, *model, opt, toml)
std::string save_checkpoint(const std::string& run_dir, const TrainPosition& position,
                            const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                            const std::string& config_toml);

/// The newest complete checkpoint of a run, if any.
std::optional<std::string> latest_checkpoint(const std::string& run_dir);

/// Restores model, optimizer and the CPU RNG from `checkpoint_dir`; returns the
/// position. A missing file, a parameter that is absent or of another shape or
/// dtype throws kiln::InputError naming the file and the mismatch, before the
/// model is touched.
TrainPosition load_checkpoint(const std::string& checkpoint_dir, torch::nn::Module& model,
                              torch::optim::Optimizer& optimizer);

}  // namespace kiln::train
