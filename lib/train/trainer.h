// The training loop of `kiln train`: data, model, optimizer, evaluation,
// metrics.jsonl, the run log and checkpoints. It reports progress to an observer
// and never prints; the app decides what the console shows.
#pragma once
#include <string>

#include "nn/mlp.h"
#include "optim/adamw.h"

namespace kiln::train {

struct TrainOptions {
  TORCH_ARG(int64_t, epochs) = 10;
  TORCH_ARG(int64_t, batch_size) = 128;
  TORCH_ARG(int64_t, eval_batch_size) = 1000;
  /// Steps between "split":"train" lines in metrics.jsonl.
  TORCH_ARG(int64_t, log_every) = 50;
  /// Steps between checkpoints; 0 saves only at the end.
  TORCH_ARG(int64_t, checkpoint_every) = 0;
  /// Stop (and checkpoint) after this many steps in total; 0 runs all epochs.
  TORCH_ARG(int64_t, max_steps) = 0;
  TORCH_ARG(uint64_t, seed) = 0;
  /// Intra-op threads; 0 keeps libtorch's default (one per core).
  TORCH_ARG(int64_t, threads) = 0;
  TORCH_ARG(std::string, device) = "cpu";
};

struct DataOptions {
  TORCH_ARG(std::string, root) = "/usr/share/datasets/fashion-mnist";
  /// Keep only the first N training / test examples; 0 keeps all.
  TORCH_ARG(int64_t, train_limit) = 0;
  TORCH_ARG(int64_t, test_limit) = 0;
};

struct RunSpec {
  std::string run_dir;
  /// The resolved config as TOML, written to run_dir/config.toml when the run
  /// starts and into every checkpoint.
  std::string config_toml;
  /// Continue from the newest checkpoint in run_dir.
  bool resume = false;
  DataOptions data;
  nn::MlpOptions model{784, {512, 256}, 10};
  optim::AdamWOptions optim;
  TrainOptions train;
};

struct StepReport {
  int64_t step, total_steps, epoch, epochs, batch, batches;  // epoch and batch 1-based
  double loss, lr, samples_per_s, elapsed_s, eta_s;
};

struct EvalReport {
  int64_t step, epoch, epochs;  // epoch 1-based
  double train_loss;            // mean over the epoch's steps
  double loss, accuracy, samples_per_s, elapsed_s, eta_s;
};

struct TrainResult {
  int64_t steps = 0;
  int64_t resumed_from = 0;  // step, 0 when the run started fresh
  double test_loss = 0.0, test_accuracy = 0.0, seconds = 0.0;
  std::string last_checkpoint;
  bool finished = false;   // all epochs done (false when max_steps stopped it)
  bool evaluated = false;  // test_loss/test_accuracy hold an evaluation of this run
};

/// What the loop tells the outside; the default does nothing.
class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  virtual void on_start(const std::string& summary) {}
  virtual void on_step(const StepReport& r) {}
  virtual void on_eval(const EvalReport& r) {}
  virtual void on_checkpoint(const std::string& dir, int64_t step) {}
};

/// Runs training as `spec` says. Bad data or checkpoints throw kiln::InputError.
/// Example: kiln::train::TrainResult r = kiln::train::train(spec, observer);
TrainResult train(const RunSpec& spec, TrainObserver& observer);

}  // namespace kiln::train
