// Checkpoints of a training run: one directory per saved step under
// RUN/checkpoints/, holding everything a bit-exact resume needs, written so that
// a crash at any instant leaves the old checkpoint or the new one, never half of
// one, and checked in full before a single parameter is overwritten.
#pragma once
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln::train {

/// Where training stands: `step` optimizer steps done; the next batch to train
/// is batch `batch` of epoch `epoch` (both 0-based); the data order of epoch e
/// is a function of (shuffle_seed, e).
struct TrainPosition {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t batch = 0;
  uint64_t shuffle_seed = 0;
  /// The training losses of the steps since the last evaluation, summed, and their
  /// count: the next test line's train_loss is their mean, the same whether or not
  /// the run was stopped and resumed in between. (Checkpoints written before these
  /// were kept read as 0: the first train_loss after such a resume covers the
  /// steps since the resume only.)
  double loss_since_eval = 0.0;
  int64_t steps_since_eval = 0;
};

/// Training state beyond the model, the optimizer, the position and the RNGs
/// (an LR schedule, a GradScaler), saved to `<name>.pt` in every checkpoint.
/// `name` is lower-case letters, digits and '_'. Example:
///   checkpointer.add_part({"scaler", [&](auto& ar) { scaler.save(ar); },
///                                    [&](auto& ar) { scaler.load(ar); }});
struct StatePart {
  std::string name;
  std::function<void(torch::serialize::OutputArchive&)> save;
  /// Throwing (c10::Error, std::exception) refuses the checkpoint, naming the file.
  std::function<void(torch::serialize::InputArchive&)> load;
};

enum class MetricMode { kMin, kMax };

/// Values recorded in a checkpoint's manifest, e.g. {{"test_accuracy", 0.87}}.
using Metrics = std::map<std::string, double>;

struct CheckpointOptions {
  /// Keep the newest K checkpoints; 0 keeps all. The newest and the best are
  /// never deleted.
  TORCH_ARG(int64_t, keep_last) = 0;
  /// The manifest metric that names the best checkpoint ("" = none), kept
  /// besides the newest K.
  TORCH_ARG(std::string, best_metric) = "";
  TORCH_ARG(MetricMode, best_mode) = MetricMode::kMax;
};

/// Saves and restores a run's full state. A checkpoint directory
/// RUN/checkpoints/step_<N, 9 digits>/ holds:
///   model.safetensors  every parameter and buffer by the module's own name
///   optimizer.pt       the optimizer's own save()
///   <part>.pt          one per StatePart
///   trainer.pt         position (step, epoch, batch, shuffle seed), CPU and CUDA RNG states
///   config.toml        the resolved config
///   manifest.json      step, metrics, and each file's size and CRC-32 (written last)
/// Example:
///   kiln::train::Checkpointer ckpt(run_dir, *model, optimizer, CheckpointOptions().keep_last(3));
///   ckpt.save(position, config_toml, {{"test_accuracy", 0.87}});
class Checkpointer {
 public:
  Checkpointer(std::string run_dir, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
               CheckpointOptions options = {});

  /// Registers a part for every later save() and load(); a bad or repeated name
  /// is a TORCH_CHECK error.
  void add_part(StatePart part);

  /// A text file (e.g. "data.json") written into every later checkpoint and listed
  /// in its manifest with size and CRC-32; a reserved or repeated name is a
  /// TORCH_CHECK error. Read it back with read_checkpoint_file().
  void add_file(std::string name, std::string text);

  /// An entry of model.safetensors' "__metadata__" in every later checkpoint, so a
  /// reader of the weights alone finds it (e.g. {"kiln.data", schema JSON}).
  void add_model_metadata(std::string key, std::string value);

  /// Writes the checkpoint of `position.step` into a temporary directory beside
  /// it, fsyncs every file and the directory, renames it into place (atomically
  /// replacing one of the same step) and fsyncs the parent; then removes
  /// leftovers of interrupted saves and applies retention. Returns the directory.
  /// The run directory is made only when it did not exist before (at construction or
  /// the first save): one deleted (or moved away) under a running job is never made
  /// again here, the save throws std::filesystem::filesystem_error (ENOENT) and the caller decides.
  std::string save(const TrainPosition& position, const std::string& config_toml,
                   const Metrics& metrics = {});

  /// Checks the whole checkpoint — every file's size and CRC-32 against the
  /// manifest ("truncated or corrupted: FILE"), the tensor names, shapes and
  /// dtypes against the model, the optimizer state, each part — and only then
  /// restores the model, optimizer, parts and RNGs. Anything wrong throws
  /// kiln::InputError naming the file and the mismatch, with the model untouched.
  /// CUDA RNG states are restored for the devices both the checkpoint and this
  /// process have. Returns where training stands.
  TrainPosition load(const std::string& checkpoint_dir);

  const std::string& run_dir() const { return run_dir_; }

 private:
  std::string run_dir_;
  torch::nn::Module& model_;
  torch::optim::Optimizer& optimizer_;
  CheckpointOptions options_;
  std::vector<StatePart> parts_;
  std::vector<std::pair<std::string, std::string>> files_;
  std::map<std::string, std::string> model_metadata_;
  bool run_dir_made_ = false;  // the run directory existed, or a save made it
};

/// The file `file` of checkpoint `dir`, checked against the manifest's size and
/// CRC-32 (kiln::InputError when it differs); nullopt when the manifest lists no
/// such file (a checkpoint from before it was written).
/// Example: auto schema = kiln::train::read_checkpoint_file(dir, "data.json");
std::optional<std::string> read_checkpoint_file(const std::string& dir, const std::string& file);

/// A complete checkpoint's manifest: its step and the metrics saved with it.
struct CheckpointInfo {
  std::string dir;
  int64_t step = 0;
  Metrics metrics;
};

/// The complete checkpoints of a run (those with a manifest), by step. Leftover
/// temporary directories of interrupted saves are not listed.
std::vector<CheckpointInfo> list_checkpoints(const std::string& run_dir);

/// The newest complete checkpoint of a run (highest step), if any.
/// Example: if (auto dir = kiln::train::latest_checkpoint("runs/x")) …
std::optional<std::string> latest_checkpoint(const std::string& run_dir);

/// Throws kiln::InputError naming RUN/checkpoints where it is there but is no directory
/// (a file, a link to none): the user's to mend, said before a resume sets anything
/// aside or trains a step. Example: kiln::train::require_checkpoints_dir("runs/x");
void require_checkpoints_dir(const std::string& run_dir);

/// Checks a checkpoint the way load() does before it restores anything, without a
/// model: a kiln manifest, and every file it lists (model, optimizer, trainer, config,
/// parts and any other) present with the size and CRC-32 it records. Anything wrong
/// throws kiln::InputError naming the file; returns the checkpoint's step.
/// Example: const int64_t step = kiln::train::verify_checkpoint("runs/x/checkpoints/step_000000032");
int64_t verify_checkpoint(const std::string& checkpoint_dir);

/// The checkpoint with the best value of `metric` (the earliest on a tie), if
/// any checkpoint recorded it.
std::optional<std::string> best_checkpoint(const std::string& run_dir, const std::string& metric,
                                           MetricMode mode);
/// The same among checkpoints already listed (list_checkpoints, in step order).
std::optional<CheckpointInfo> best_checkpoint(const std::vector<CheckpointInfo>& checkpoints,
                                              const std::string& metric, MetricMode mode);

/// Where set_aside_after() moves what a run wrote after the step it resumes from.
inline constexpr const char* kSupersededDir = "superseded";

/// What resuming from a checkpoint older than a run's newest does first, so the run
/// holds one trajectory: every checkpoint of a later step is renamed (not deleted)
/// into RUN/superseded/ (step_<N>, or step_<N>-2, … when that name is taken), and
/// the lines of metrics.jsonl and memory.jsonl with a later step are moved to
/// metrics.superseded.jsonl and memory.superseded.jsonl beside them (appended, in
/// order). Returns how many checkpoints were set aside; nothing later, nothing done.
/// Example: kiln::train::set_aside_after("runs/x", 25);
int64_t set_aside_after(const std::string& run_dir, int64_t step);

/// The checkpoint a command's CHECKPOINT argument names (kiln export, kiln sample):
/// itself when it has a manifest, else the newest complete checkpoint of the run
/// directory it is; anything else throws kiln::InputError saying what was found.
/// Example: const auto dir = kiln::train::resolve_checkpoint("runs/gpt_char");
std::string resolve_checkpoint(const std::string& arg);

struct ResumeTarget {
  std::string run_dir;         // the run the checkpoint belongs to
  std::string checkpoint_dir;  // RUN/checkpoints/step_<N>
};

/// What `--resume ARG` means. ARG is
///  - a checkpoint directory (has manifest.json): that checkpoint, of the run two levels up;
///  - a run directory (has checkpoints/): its newest checkpoint;
///  - "latest": the most recently written checkpoint of `runs_dir` itself if it
///    is a run directory, else of the run directories directly inside it.
/// Anything else, or a run without a complete checkpoint, throws kiln::InputError.
/// Example: auto target = kiln::train::resolve_resume("latest", config.run.dir);
ResumeTarget resolve_resume(const std::string& arg, const std::string& runs_dir = "");

}  // namespace kiln::train
