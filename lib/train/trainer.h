// The training loop of `kiln train`: data, model, optimizer, schedule, mixed
// precision, gradient accumulation, evaluation, metrics.jsonl and memory.jsonl,
// checkpoints, interruption. It reports progress to an observer and never prints;
// the app decides what the console shows.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "data/dataset.h"
#include "nn/factory.h"
#include "optim/factory.h"
#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "train/memory.h"
#include "train/profiler.h"

namespace kiln::dist {
class Group;
}

namespace kiln::train {

struct TrainOptions {
  TORCH_ARG(int64_t, epochs) = 10;
  /// Examples per optimizer step.
  TORCH_ARG(int64_t, batch_size) = 128;
  /// Micro-batches per step: each step's batch is split into this many parts whose
  /// gradients add up (weighted by their sizes), so the step sees the same mean loss.
  TORCH_ARG(int64_t, accumulate) = 1;
  TORCH_ARG(int64_t, eval_batch_size) = 1000;
  /// Steps between evaluations; 0 evaluates at the end of each epoch only.
  TORCH_ARG(int64_t, eval_every) = 0;
  /// Steps between "split":"train" lines in metrics.jsonl.
  TORCH_ARG(int64_t, log_every) = 50;
  /// Stop (and checkpoint) after this many steps in total; 0 runs all epochs.
  TORCH_ARG(int64_t, max_steps) = 0;
  TORCH_ARG(uint64_t, seed) = 0;
  /// Intra-op threads; 0: libtorch's default capped by the CPUs this process may use (util/cpus.h).
  TORCH_ARG(int64_t, threads) = 0;
  /// Batches a worker thread assembles ahead of the step (data::PrefetchOptions::depth);
  /// 0 assembles each one in the loop; −1 (auto) is 0 on the CPU and 2 on an accelerator.
  TORCH_ARG(int64_t, prefetch) = -1;
  /// Keep the data set on the device, each batch gathered there (true), or in host
  /// memory, each batch gathered on the host and copied over — pinned and
  /// non-blocking on CUDA — for data sets larger than the device (false).
  TORCH_ARG(bool, data_on_device) = true;
  /// The run's CPU threads treat float denormals (below 1.2e-38) as zero
  /// (util/denormals.h): true, or keep them, as PyTorch does by default (false).
  TORCH_ARG(bool, flush_denormals) = true;
  TORCH_ARG(std::string, device) = "cpu";
  /// "fp32", "bf16" or "fp16" (see train/amp.h).
  TORCH_ARG(std::string, precision) = "fp32";
  /// Clip gradients to this global norm; 0 = no clipping (the norm is still logged).
  TORCH_ARG(double, clip_norm) = 0.0;
};

struct ScheduleSpec {
  /// optim::schedule_kinds(): constant, cosine, linear, wsd.
  TORCH_ARG(std::string, kind) = "constant";
  TORCH_ARG(int64_t, warmup_steps) = 0;
  /// The final learning rate as a fraction of the peak.
  TORCH_ARG(double, min_lr_ratio) = 0.0;
  /// wsd: the fraction of all steps spent in the final (linear) decay.
  TORCH_ARG(double, decay_fraction) = 0.2;
};

struct CheckpointSpec {
  /// Steps between checkpoints; 0 saves only at the end (and at evaluations when
  /// a best metric is kept).
  TORCH_ARG(int64_t, every) = 0;
  TORCH_ARG(int64_t, keep_last) = 3;
  /// The test metric that names the best checkpoint: test_loss, or one the task
  /// reports (test_accuracy; test_rmse, test_r2), better being higher for accuracy
  /// and R², lower for loss and RMSE; "auto" is the task's first (test_accuracy,
  /// test_rmse); "" keeps none.
  TORCH_ARG(std::string, best) = "auto";
};

struct MemoryOptions {
  /// Steps between memory reports; 0 reports at the end only.
  TORCH_ARG(int64_t, report_every) = 0;
  /// CUDA: cap of the caching allocator as a fraction of the device; 0 = none.
  TORCH_ARG(double, fraction) = 0.0;
  /// CUDA: empty the allocator's cache every N steps; 0 = never.
  TORCH_ARG(int64_t, empty_cache_every) = 0;
  /// CUDA: record allocation history and write RUN/memory_snapshot.pickle at the end.
  TORCH_ARG(bool, history) = false;
};

/// Data-parallel training (docs/distributed.md).
struct DistOptions {
  /// train.batch_size is the step's batch across all processes (split among them),
  /// not each process's.
  TORCH_ARG(bool, global_batch) = false;
  /// Bytes of gradients all-reduced together (DDP's bucket_cap_mb).
  TORCH_ARG(int64_t, bucket_bytes) = 25 << 20;
};

struct TensorBoardOptions {
  /// Steps between histograms of every weight and gradient in RUN/tb/; 0 = none.
  TORCH_ARG(int64_t, histogram_every) = 0;
};

using data::DataOptions;

/// The data schema's file (data::DataSchema as JSON) in a run directory and in
/// every checkpoint; model.safetensors carries it too, as metadata "kiln.data".
inline constexpr const char* kDataFile = "data.json";

/// In every checkpoint: how many processes trained the run, each taking how many
/// examples a step from how many an epoch ({"processes": N, "batch_per_process": B,
/// "examples_per_process": E}); a resume must match them (docs/distributed.md).
inline constexpr const char* kDistFile = "dist.json";

/// The data schema a checkpoint carries (its data.json, checked against the manifest),
/// or nullopt for a checkpoint written before it had one; a file that is not a valid
/// schema throws kiln::InputError naming it.
/// Example: if (auto schema = kiln::train::read_data_schema(dir)) …
std::optional<data::DataSchema> read_data_schema(const std::string& checkpoint_dir);

struct RunSpec {
  std::string run_dir;
  /// The resolved config as TOML, written to run_dir/config.toml when the run
  /// starts and into every checkpoint.
  std::string config_toml;
  /// A checkpoint directory of this run to continue from; empty starts fresh.
  std::string resume_checkpoint;
  /// A resume's settings that differ from the run's config.toml ("optim.lr 0.001 →
  /// 0.01"), for train.log. The config's optimizer hyperparameters and learning rates
  /// apply from the resumed step on; the checkpoint gives the optimizer's state.
  std::vector<std::string> resume_changes;
  /// Weights to start a fresh run from (train/init_from.h): a .safetensors file or
  /// a checkpoint directory; ignored when resuming. Empty: random initialisation.
  std::string init_from;
  DataOptions data;
  nn::ModelSpec model;
  optim::OptimizerSpec optim;
  ScheduleSpec schedule;
  TrainOptions train;
  CheckpointSpec checkpoint;
  MemoryOptions memory;
  /// Steps to record with the profiler (RUN/profile/); first 0 records none.
  ProfileOptions profile;
  TensorBoardOptions tensorboard;
  DistOptions dist;
  /// Data-parallel: this process's group (the app makes it from torchrun's
  /// environment); null trains in this process alone. Rank 0 alone writes the run.
  dist::Group* group = nullptr;
};

struct StepReport {
  int64_t step, total_steps, epoch, epochs, batch, batches;  // epoch and batch 1-based
  double lr, samples_per_s, elapsed_s, eta_s;
  int64_t skipped_steps;  // fp16: steps skipped for inf/NaN gradients so far
  /// The step's training loss and gradient norm {loss, grad_norm}. They stay on the
  /// device until asked for: calling this brings the steps since the last read to the
  /// host in one copy (on CUDA a host sync, which the loop itself makes on log steps
  /// only), so an observer that shows them less often than every step should call it
  /// only when it shows them. Valid during on_step only.
  std::function<std::pair<double, double>()> loss_and_grad_norm;
};

struct EvalReport {
  int64_t step, epoch, epochs;  // epoch 1-based
  double train_loss;            // mean over the steps since the last evaluation
  double loss;                  // test loss
  /// The task's test metrics by name (evaluate.h): accuracy; rmse, r2.
  std::map<std::string, double> metrics;
  double samples_per_s, elapsed_s, eta_s;
};

struct TrainResult {
  int64_t steps = 0;
  int64_t resumed_from = 0;  // step, 0 when the run started fresh
  /// Checkpoints of later steps set aside because the run resumed from an older
  /// one (set_aside_after, RUN/superseded/).
  int64_t superseded_checkpoints = 0;
  double test_loss = 0.0, test_accuracy = 0.0, seconds = 0.0;  // accuracy: classification
  /// The last evaluation's metrics by name (accuracy; rmse, r2) and, for a classifier
  /// that finished, the accuracy of each class by name.
  std::map<std::string, double> metrics;
  std::vector<std::pair<std::string, double>> per_class_accuracy;
  /// For a model of run-time depth that finished (nn::DepthSampled), the last
  /// evaluation at each depth min..max.
  std::vector<DepthEval> per_depth;
  /// What the run trained on: task, shapes, classes, input transform.
  data::DataSchema schema;
  std::string last_checkpoint;
  bool finished = false;   // all epochs done (false when max_steps or a signal stopped it)
  bool evaluated = false;  // test_loss/test_accuracy hold an evaluation of this run
  int interrupted_by = 0;  // what stop_requested() answered (SIGINT, SIGTERM, SIGHUP) when it stopped the run
  int64_t skipped_steps = 0;
};

/// Per-class accuracies as one JSON object in the run's class order, null for a class
/// the test split lacks (NaN): the last test line's "per_class_accuracy", and
/// --log-format=json's. The names are distinct, so they are appended: ordered_json's
/// operator[] searches the keys on every insert, which took minutes for a million
/// class ids. Example: line["per_class_accuracy"] = kiln::train::per_class_json(result.per_class_accuracy);
nlohmann::ordered_json per_class_json(const std::vector<std::pair<std::string, double>>& accuracy);

/// What the loop tells the outside; the default does nothing.
class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  virtual void on_start(const std::string& summary) {}
  virtual void on_step(const StepReport& r) {}
  virtual void on_eval(const EvalReport& r) {}
  virtual void on_checkpoint(const std::string& dir, int64_t step) {}
  virtual void on_memory(const MemoryReport& r) {}
  /// A profiled window ended: its trace and tables are written (r.text holds the tables).
  virtual void on_profile(const ProfileReport& r) {}
  /// Asked after every step: non-zero (the signal, SIGINT, SIGTERM or SIGHUP, that asks for
  /// it) ends the run after that step with a checkpoint, in result.interrupted_by.
  /// The app answers it from its signal handlers; lib/ installs none.
  virtual int stop_requested() { return 0; }
};

/// The run stopped because the loss or a gradient became inf/NaN (fp32, bf16);
/// the message names the first non-finite gradient or parameter. The last
/// checkpoint written before is kept as it was.
class TrainingDiverged : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Runs training as `spec` says. Bad data or checkpoints throw kiln::InputError;
/// observer.stop_requested() ends it after the current step with a checkpoint
/// (result.interrupted_by).
/// Example: kiln::train::TrainResult r = kiln::train::train(spec, observer);
TrainResult train(const RunSpec& spec, TrainObserver& observer);

}  // namespace kiln::train
