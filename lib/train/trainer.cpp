// train(): the loop. Every position in it is a pure function of (seed, step), so a
// run that resumes from a checkpoint continues exactly where it stopped.
#include "train/trainer.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <chrono>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <thread>

#include "data/augment.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/prefetch.h"
#include "dist/process_group.h"
#include "dist/reducer.h"
#include "nn/depth_sampled.h"
#include "nn/mlp.h"
#include "ops/cpu_bf16.h"
#include "ops/linear/linear_onednn.h"
#include "ops/ops.h"
#include "optim/clip.h"
#include "optim/schedule.h"
#include "train/amp.h"
#include "train/device.h"
#include "train/evaluate.h"
#include "train/histograms.h"
#include "train/init_from.h"
#include "train/run_parts.h"
#include "util/cpus.h"
#include "util/denormals.h"
#include "util/error.h"
#include "util/files.h"
#include "util/heap.h"
#include "util/tfevents.h"
#include "util/json_lines.h"
#include "util/log.h"

namespace kiln::train {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The first gradient, then the first parameter, holding an inf or a NaN, by name.
std::string first_non_finite(const torch::nn::Module& model) {
  const auto params = model.named_parameters();
  for (const auto& p : params)
    if (p.value().grad().defined() && !p.value().grad().isfinite().all().item<bool>())
      return "the gradient of " + p.key();
  for (const auto& p : params)
    if (!p.value().isfinite().all().item<bool>()) return "the parameter " + p.key();
  return "no gradient or parameter (only the loss)";
}

}  // namespace

nlohmann::ordered_json per_class_json(const std::vector<std::pair<std::string, double>>& accuracy) {
  nlohmann::ordered_json per = nlohmann::ordered_json::object();
  auto& entries = static_cast<std::vector<std::pair<const std::string, nlohmann::ordered_json>>&>(
      per.get_ref<nlohmann::ordered_json::object_t&>());
  entries.reserve(accuracy.size());
  for (const auto& [name, a] : accuracy)
    entries.emplace_back(name, std::isnan(a) ? nlohmann::ordered_json() : nlohmann::ordered_json(a));
  return per;
}

namespace {

optim::ScheduleOptions schedule_options(const ScheduleSpec& s, int64_t total_steps) {
  optim::ScheduleOptions o;
  o.kind(s.kind()).warmup_steps(s.warmup_steps()).min_lr_ratio(s.min_lr_ratio());
  // A run no longer than its warmup (a short test of a config) never reaches the peak
  // rate: the schedule spans one step past the warmup instead of refusing.
  o.total_steps(std::max(total_steps, s.warmup_steps() + 1));
  if (s.kind() == "wsd") {
    const auto decay = static_cast<int64_t>(std::llround(s.decay_fraction() * total_steps));
    o.decay_start(std::max(s.warmup_steps(), total_steps - decay));
  }
  return o;
}

// A checkpoint's position counts each process's share of an epoch in steps of its
// batch: it resumes only with as many processes as wrote it (its dist.json; none: one
// process), each taking as many examples a step from as many an epoch. Another batch
// size or another training split would read the position as another point of the
// epoch (examples skipped or seen twice, or past its end) and stretch or shrink the
// learning-rate schedule, which counts the same steps.
void check_resume_shape(const std::string& checkpoint, int64_t world, int64_t batch, int64_t examples) {
  int64_t saved = 1;
  const auto text = read_checkpoint_file(checkpoint, kDistFile);
  nlohmann::json j;
  if (text) {
    j = nlohmann::json::parse(*text, nullptr, false);
    saved = j.is_object() && j.contains("processes") && j["processes"].is_number_integer()
                ? j["processes"].get<int64_t>()
                : -1;
    if (saved < 1)
      throw InputError(c10::str(checkpoint, "/", kDistFile, ": expected {\"processes\": N, …}, found ", *text));
  }
  if (saved != world)
    throw InputError(c10::str(
        "--resume ", checkpoint, ": expected ", saved, " process", saved == 1 ? "" : "es",
        " (the checkpoint's run trained in ", saved, ", each with its share of every epoch), found ", world,
        ": resume it with ",
        saved == 1 ? std::string("kiln train alone") : c10::str("torchrun --nproc-per-node=", saved)));
  const auto recorded = [&](const char* key) -> std::optional<int64_t> {
    if (!text || !j.contains(key) || !j[key].is_number_integer()) return std::nullopt;  // older checkpoints
    return j[key].get<int64_t>();
  };
  // key: dist.json's count; what: what it counts ("train.batch_size"); counted: its
  // unit (" examples a step"); instead: how to resume with the run's own.
  const auto refuse_other = [&](const char* key, int64_t now, const char* what, const char* counted,
                                const char* instead) {
    const auto was = recorded(key);
    if (!was || *was == now) return;
    throw InputError(c10::str("--resume ", checkpoint, ": ", what, ": expected ", *was, counted,
                              world > 1 ? " per process" : "", " (the checkpoint's run had ", *was,
                              ", and its place in the epoch and its learning-rate schedule count them), found ",
                              now, "; ", instead, ", or start a new run from these weights with model.init_from=",
                              checkpoint));
  };
  refuse_other("batch_per_process", batch, "train.batch_size", " examples a step",
               "to use less memory a step, raise train.accumulate instead (micro-batches of one step)");
  refuse_other("examples_per_process", examples, "the training split", " examples an epoch",
               "resume with the run's data (its data.* keys, e.g. data.train_limit)");
}

class Run {
 public:
  Run(const RunSpec& spec, TrainObserver& observer);
  TrainResult run();

 private:
  void step(const data::Batch& batch);
  // Whether step n measures its activations (ActivationProbe: on the CPU two readings
  // of glibc's mallinfo2, each a walk over the heap's bins that also merges its fast
  // bins; 0.3-1.4 % of the default MLP's samples/s at batch 32 when every step did):
  // a step whose memory report can follow it (every memory.report_every-th, the run's
  // planned last) and the first this process trains, so that a report after an early
  // stop has a figure.
  bool measures_activations(int64_t n) const {
    const int64_t every = spec_.memory.report_every();
    return n == result_.resumed_from + 1 || n == total_steps_ || (every > 0 && n % every == 0);
  }
  void evaluate_now();
  bool checkpoint_due() const {
    return spec_.checkpoint.every() > 0 && pos_.step % spec_.checkpoint.every() == 0;
  }
  EvalShard eval_shard() const;
  void check_replicas();
  void save(bool with_metrics);
  void write_run_files();
  bool run_dir_gone() const;
  [[noreturn]] void rescue_run_dir();
  void report_memory();
  at::Tensor forward(const at::Tensor& x);

  const RunSpec& spec_;
  const TrainOptions& opt_;
  TrainObserver& observer_;
  torch::Device device_;
  PrecisionPlan plan_;
  data::Data data_;
  std::optional<data::ImageAugment> augment_;
  std::string schema_json_;
  std::string best_metric_;
  std::optional<data::BatchLoader> loader_;
  torch::nn::AnyModule model_;
  std::shared_ptr<torch::nn::Module> module_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::optional<optim::LrSchedule> schedule_;
  GradScaler scaler_;
  std::optional<Checkpointer> checkpointer_;
  std::optional<JsonLines> metrics_, memory_lines_;
  std::optional<tfevents::EventWriter> tb_;  // RUN/tb: every metrics.jsonl number for TensorBoard
  std::optional<StepProfiler> profiler_;    // RUN/profile: spec.profile's steps
  dist::Group* group_;                      // data-parallel: the processes; null alone
  std::optional<dist::GradientReducer> reducer_;
  bool writes_;                             // rank 0 (or alone): writes the run directory
  std::optional<files::FileId> run_dir_id_;  // the directory this run writes, to notice it gone

  TrainPosition pos_;
  TrainResult result_;
  int64_t batch_ = 0;  // examples a step in this process (train.batch_size, or its share of it)
  int64_t total_steps_ = 0, batches_ = 0, saved_step_ = -1, evaluated_step_ = -1,
          reported_step_ = -1;
  // A resume at an epoch's end evaluates that step's model again, for the run's
  // result (in data-parallel runs, every process takes part), but its metrics line
  // and TensorBoard points are already in the run: this is that step, or -1.
  int64_t recorded_eval_step_ = -1;
  int64_t activation_peak_ = 0;
  // A step's loss and gradient norm stay on the device: step() writes them into row
  // unread_ of step_values_ (float64, kUnreadRows × 2) with no host sync, and
  // read_step_values() brings the unread rows to the host in one copy, adding each
  // loss to pos_.loss_since_eval and leaving the last pair in loss_ and grad_norm_.
  // The loop reads on log steps, every kUnreadRows steps, before an evaluation or a
  // checkpoint and at the end (check_finite: the same steps in every process), and
  // when an observer asks (StepReport::loss_and_grad_norm).
  // Without clipping, a step computes no gradient norm (a pass over the gradients
  // that only the logs want): last_grad_norm() computes it from the gradients the
  // last step left, on log steps and when an observer asks.
  static constexpr int64_t kUnreadRows = 64;
  void write_step_values(const at::Tensor& loss, const at::Tensor& grad_norm);
  void read_step_values();
  void check_finite();
  double last_grad_norm();
  at::Tensor step_values_;
  at::Tensor backward_seed_;  // the 1 the loss's backward starts from (step())
  // The model when its step runs taped (nn::MlpImpl::forward_taped / backward_taped:
  // the same ops as autograd's graph, without building it), else null: taped_step().
  nn::MlpImpl* taped_ = nullptr;
  nn::MlpTape tape_;
  int64_t unread_ = 0, unread_first_step_ = 0;
  bool grad_norm_known_ = false;  // grad_norm_ is the last step's
  struct NonFinite {
    int64_t step;
    double loss, grad_norm;
  };
  std::optional<NonFinite> non_finite_;  // the first step read with an inf/NaN loss or norm
  double loss_ = 0.0, grad_norm_ = 0.0;
  int64_t window_samples_ = 0, trained_samples_ = 0;
  Clock::time_point start_, window_start_;
};

Run::Run(const RunSpec& spec, TrainObserver& observer)
    : spec_(spec),
      opt_(spec.train),
      observer_(observer),
      // Data-parallel on CUDA: each process its own GPU, cuda:LOCAL_RANK, unless the config names one.
      device_(resolve_device(spec.group && spec.train.device() == "cuda"
                                 ? "cuda:" + std::to_string(spec.group->env().local_rank)
                                 : spec.train.device())),
      plan_(precision_plan(spec.train.precision(), device_.type())),
      scaler_(GradScalerOptions().enabled(plan_.loss_scaling)),
      group_(spec.group),
      writes_(!spec.group || spec.group->rank() == 0) {
  util::set_threads(opt_.threads());
  torch::manual_seed(opt_.seed());
  if (writes_) {
    fs::create_directories(spec.run_dir);
    run_dir_id_ = files::file_id(spec.run_dir);
    log::open_file((fs::path(spec.run_dir) / "train.log").string());
  }
  if (const unsigned cores = std::thread::hardware_concurrency(); cores > 0 && opt_.threads() > cores)
    log::warn(c10::str("train.threads = ", opt_.threads(), " is more than this machine's ", cores,
                       " CPU threads: the extra ones only wait their turn, and every step slows (0 takes the CPUs "
                       "this process may use)"));
  if (device_.is_cuda()) {
    if (spec.memory.fraction() > 0) set_cuda_memory_fraction(spec.memory.fraction(), device_.index());
    if (spec.memory.history()) record_cuda_memory_history(true);
  }

  // Data, with the input transform fitted on the training split; a resumed run
  // applies the one its checkpoint saved (data.json), even if the files changed.
  std::optional<data::DataSchema> saved;
  if (!spec.resume_checkpoint.empty()) saved = read_data_schema(spec.resume_checkpoint);
  data_ = load_run_data(spec.data, spec.model.name, saved ? &*saved : nullptr);
  if (opt_.data_on_device()) {
    data_.train.x = data::to_device(data_.train.x, device_);  // (N, …)
    data_.train.y = data::to_device(data_.train.y, device_);  // (N) class ids, (N, outputs) targets, (N, T) tokens
    data_.test.x = data::to_device(data_.test.x, device_);    // (evaluate() moves host batches itself)
    data_.test.y = data::to_device(data_.test.y, device_);
  }
  const auto& schema = data_.schema;
  result_.schema = schema;
  if (spec.data.augment_flip() || spec.data.augment_crop() > 0) {
    const auto& s = schema.input_shape;
    if ((s.size() != 2 && s.size() != 3) || data::model_input_size(schema) != c10::multiply_integers(s))
      throw InputError(c10::str("data.augment_flip, data.augment_crop: expected image data, examples "
                                "of shape (C, H, W) or (H, W), found ", c10::IntArrayRef(s)));
    // Padding is 0: for idx a black pixel, as the batch is augmented in uint8 before
    // model_inputs() decodes it (to (0 · scale − mean) / std); for standardised data, the mean.
    augment_.emplace(s.size() == 3 ? s : std::vector<int64_t>{1, s[0], s[1]});
    augment_->flip(spec.data.augment_flip()).crop_padding(spec.data.augment_crop()).fill(0.0).seed(opt_.seed());
  }
  // Data-parallel: each process takes its share of every epoch (BatchLoader::shard),
  // batch_size examples a step (dist.batch = "per_rank"), or batch_size / processes.
  batch_ = opt_.batch_size();
  if (group_ && spec.dist.global_batch()) {
    if (batch_ % group_->size() != 0 || (batch_ / group_->size()) % opt_.accumulate() != 0)
      throw InputError(c10::str("train.batch_size: with dist.batch = \"global\", expected a multiple of the ",
                                group_->size(), " processes (times train.accumulate, ", opt_.accumulate(),
                                "), found ", batch_));
    batch_ /= group_->size();
  }
  loader_.emplace(data_.train.x, data_.train.y, batch_, /*shuffle=*/true, opt_.seed(), data_.train_draws);
  if (group_) loader_->shard(group_->rank(), group_->size());
  batches_ = loader_->size();
  if (batch_ > loader_->examples())
    log::warn(c10::str("train.batch_size (", batch_, group_ ? " a process" : "", ") is more than the ",
                       loader_->examples(), " training examples", group_ ? " each process takes" : "",
                       " an epoch: every step takes all of them, one batch of ", loader_->examples()));
  total_steps_ = opt_.epochs() * batches_;
  if (opt_.max_steps() > 0) total_steps_ = std::min(total_steps_, opt_.max_steps());

  // A window after the run's last step (a config's window, a short run of it) profiles
  // nothing; the run's summary says so.
  profiler_.emplace(writes_ ? spec.profile : ProfileOptions(), (fs::path(spec.run_dir) / "profile").string(),
                    device_);

  model_ = build_model(spec.model, schema);
  module_ = model_.ptr();
  if (!spec.init_from.empty() && spec.resume_checkpoint.empty()) {
    const int64_t n = init_from(*module_, spec.init_from);
    log::info(c10::str("initialised ", n, " tensors from ", spec.init_from));
  }
  try {
    module_->to(device_);
  } catch (const c10::OutOfMemoryError& e) {  // the first of the run's device memory
    int64_t bytes = 0;
    for (const auto& p : module_->parameters()) bytes += static_cast<int64_t>(p.nbytes());
    const std::string what = e.what_without_backtrace();
    throw InputError(c10::str("model: its parameters (", bytes >> 20, " MiB) do not fit on ", device_, " (",
                              what.substr(0, what.find('\n')), "): expected model sizes (model.*) that ",
                              device_, " can hold with room for their gradients and optimizer state"));
  }
  optimizer_ = build_optimizer(spec.optim, *module_);
  taped_ = taped_step(*module_);
  // The schedule spans all epochs: max_steps only stops the run (to be resumed later),
  // so a run stopped and resumed follows the same learning rates as one straight run.
  schedule_.emplace(*optimizer_, schedule_options(spec.schedule, opt_.epochs() * batches_));
  {
    // Every schedule warms up, the constant one too: factor(t) = (t + 1) / warmup_steps.
    const int64_t steps = opt_.epochs() * batches_, warmup = spec.schedule.warmup_steps();
    if (warmup > steps || (spec.schedule.kind() != "constant" && warmup > 0 && warmup >= steps))
      log::warn(c10::str("schedule.warmup_steps (", warmup, ") is not below the run's ", steps,
                         " steps: the learning rate never reaches optim.lr (at most ",
                         std::min(1.0, static_cast<double>(steps) / static_cast<double>(warmup)), " of it)"));
  }
  best_metric_ = spec.checkpoint.best();
  {
    const auto& names = schema_metrics(schema);
    if (best_metric_ == "auto") best_metric_ = "test_" + names[0];
    std::string valid = "test_loss";
    bool known = best_metric_.empty() || best_metric_ == valid;
    for (const auto& m : names) {
      valid += ", test_" + m;
      known = known || best_metric_ == "test_" + m;
    }
    if (!known)
      throw InputError(c10::str("checkpoint.best: expected one of ", valid, " (the metrics of ",
                                data::task_name(schema.task), "), auto or \"\", found \"",
                                spec.checkpoint.best(), "\""));
  }
  checkpointer_.emplace(
      spec.run_dir, *module_, *optimizer_,
      CheckpointOptions()
          .keep_last(spec.checkpoint.keep_last())
          .best_metric(best_metric_)
          .best_mode(!best_metric_.empty() && higher_is_better(best_metric_.substr(5))
                         ? MetricMode::kMax
                         : MetricMode::kMin));
  schema_json_ = schema.to_json().dump(2) + "\n";  // the run's data.json and every checkpoint's
  checkpointer_->add_file(kDataFile, schema_json_);
  checkpointer_->add_model_metadata("kiln.data", schema.to_json().dump());
  checkpointer_->add_part({"schedule", [this](auto& ar) { schedule_->save(ar); },
                           [this](auto& ar) { schedule_->load(ar); }});
  checkpointer_->add_part({"scaler", [this](auto& ar) { scaler_.save(ar); },
                           [this](auto& ar) { scaler_.load(ar); }});
  pos_.shuffle_seed = opt_.seed();
  // How many processes wrote a checkpoint, and so how its position (the batch within
  // the epoch, each process's share) is to be read: a resume must use as many.
  const int64_t world = group_ ? group_->size() : 1;
  checkpointer_->add_file(kDistFile, nlohmann::json{{"processes", world},
                                                    {"batch_per_process", batch_},
                                                    {"examples_per_process", loader_->examples()}}
                                            .dump() + "\n");
  if (!spec.resume_checkpoint.empty()) {
    check_resume_shape(spec.resume_checkpoint, world, batch_, loader_->examples());
    // The checkpoint holds the optimizer's state and the schedule's step; its
    // hyperparameters (learning rates, betas, weight decay…) are the config's, so a
    // resume with --set optim.lr=… trains at that rate (the load put the checkpoint's back).
    std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> configured;
    for (auto& group : optimizer_->param_groups()) configured.push_back(group.options().clone());
    const std::vector<double> configured_lrs = schedule_->base_lrs();
    pos_ = checkpointer_->load(spec.resume_checkpoint);
    const std::vector<double> saved_lrs = schedule_->base_lrs();
    auto& groups = optimizer_->param_groups();
    for (size_t g = 0; g < groups.size(); ++g) groups[g].set_options(std::move(configured[g]));
    schedule_->rebase(configured_lrs);
    if (saved_lrs != configured_lrs)
      log::info(c10::str("learning rates from step ", pos_.step + 1, " on: ", c10::Join(", ", configured_lrs),
                         " (the checkpoint's run had ", c10::Join(", ", saved_lrs), ")"));
    if (pos_.batch > batches_)  // a checkpoint from before dist.json counted examples
      throw InputError(c10::str("--resume ", spec.resume_checkpoint, ": its place in the epoch, batch ", pos_.batch,
                                ", lies past this epoch's ", batches_, batches_ == 1 ? " batch" : " batches",
                                ": the training split is smaller than "
                                "the checkpoint's run had; resume with the run's data (its data.* keys), or start a "
                                "new run from these weights with model.init_from=", spec.resume_checkpoint));
    // Fewer epochs than the run has trained would leave a run whose config says less
    // than its checkpoints did (and a later resume would follow the config).
    if (pos_.epoch * batches_ + pos_.batch > opt_.epochs() * batches_) {
      const int64_t done = pos_.epoch + (pos_.batch > 0 ? 1 : 0);
      throw InputError(c10::str("train.epochs: expected at least ", done, " (the run has trained ",
                                pos_.batch > 0 && pos_.batch < batches_ ? "into epoch " : "", done,
                                pos_.batch > 0 && pos_.batch < batches_ ? "" : done == 1 ? " epoch" : " epochs",
                                ": ", spec.resume_checkpoint, " is step ", pos_.step, "), found ", opt_.epochs(),
                                "; to stop a run early, train.max_steps"));
    }
    result_.resumed_from = pos_.step;
    // The checkpoint of this step is the one just read: a run that trains no further
    // step (already finished) does not write it again.
    saved_step_ = pos_.step;
    result_.last_checkpoint = spec.resume_checkpoint;
    log::info(c10::str("resumed from ", spec.resume_checkpoint, " at step ", pos_.step,
                       spec.resume_changes.empty() ? "" : " with ", c10::Join(", ", spec.resume_changes)));
  }
  if (group_) {
    // Every process starts from rank 0's parameters and buffers (a fresh run's
    // initialisation; a resumed one's are equal already), and its gradients are
    // averaged by c10d's Reducer, bucket by bucket as backward produces them (a taped
    // step: the same buckets and arithmetic, started as backward_taped reports them).
    std::vector<at::Tensor> state;
    for (const auto& p : module_->parameters()) state.push_back(p.detach());
    for (const auto& b : module_->buffers()) state.push_back(b);
    group_->broadcast_(state, 0);
    std::vector<at::Tensor> trained;
    for (const auto& p : module_->parameters())
      if (p.requires_grad()) trained.push_back(p);
    const bool depth_sampled = dynamic_cast<nn::DepthSampled*>(module_.get()) != nullptr;
    reducer_.emplace(*group_, trained, spec.dist.bucket_bytes(), /*find_unused=*/depth_sampled,
                     /*taped=*/taped_ != nullptr);
    log::info(c10::str("data-parallel: rank ", group_->rank(), " of ", group_->size(), ", ", batch_,
                       " examples a step each, ", reducer_->buckets().size(), " gradient buckets",
                       taped_ ? " (all-reduced by the taped step)" : " (c10d's Reducer)"));
  }
}

at::Tensor Run::forward(const at::Tensor& x) {
  AutocastGuard amp(device_.type(), plan_.dtype, plan_.autocast);  // fp32: autocast off
  return model_.forward(data::model_inputs(x, data_.schema));
}

// One optimizer step over batch (B examples) in `accumulate` micro-batches.
void Run::step(const data::Batch& batch) {
  nn::begin_step(*module_, opt_.seed(), pos_.step);  // a model of run-time depth draws this step's
  optimizer_->zero_grad();
  const int64_t rows = batch.x.size(0);
  const int64_t micro = (rows + opt_.accumulate() - 1) / opt_.accumulate();
  const auto xs = batch.x.split(micro), ys = batch.y.split(micro);
  at::Tensor loss;  // Σ weight · part in float64 on the device: read on log steps only
  const bool traced = profiler_->recording();  // the loop's phases as the trace's user scopes
  // The last measured step's: the memory report shows it, not the first's one-time costs
  const bool measured = measures_activations(pos_.step + 1);
  if (measured) activation_peak_ = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    std::optional<ActivationProbe> probe;
    if (measured) probe.emplace(device_);
    at::Tensor part;
    // Data-parallel: the last micro-batch's backward all-reduces the gradients the
    // earlier ones accumulated (DDP's no_sync before it).
    const bool reduce = reducer_ && i + 1 == xs.size();
    if (reduce && !taped_) reducer_->prepare_for_forward();
    at::Tensor output;  // the taped step's, for its backward
    TapedLoss saved;
    {
      PhaseScope phase(traced, "forward");
      if (taped_) {
        // Under autocast the weights' casts of the step's first micro-batch serve the
        // others (no parameter changes within a step; autograd would cast again).
        output = taped_->forward_taped(data::model_inputs(xs[i], data_.schema), tape_,
                                       plan_.autocast ? std::optional(plan_.dtype) : std::nullopt,
                                       /*reuse_casts=*/i > 0);
        saved = taped_loss(output, ys[i], data_.schema);
        part = saved.loss;
      } else {
        AutocastGuard amp(device_.type(), plan_.dtype, plan_.autocast);  // the loss too
        part = training_loss(model_.forward(data::model_inputs(xs[i], data_.schema)), ys[i], data_.schema);
      }
    }
    if (probe) probe->forward_done();
    const double weight = static_cast<double>(xs[i].size(0)) / static_cast<double>(rows);
    {
      PhaseScope phase(traced, "backward");
      const auto scaled = taped_ ? part : scaler_.scale(weight == 1.0 ? part : part * weight);
      if (reduce && !taped_) reducer_->prepare_for_backward(scaled);
      // Backward starts from a 1 made once: backward() without one fills a new one each
      // step (ones_like: on CUDA an allocation and a launch).
      if (!backward_seed_.defined() || backward_seed_.scalar_type() != scaled.scalar_type() ||
          backward_seed_.device() != scaled.device() || backward_seed_.sizes() != scaled.sizes())
        backward_seed_ = at::ones(scaled.sizes(), scaled.options());  // fp16's scaled loss is (1)
      if (taped_) {
        // The gradient autograd would give the output: the seed through the scaler's
        // part · scale (fp16: a (1) tensor times the (1) scale, reduced to part's shape,
        // one value, as autograd reduces it) and part · weight (the same multiplies),
        // then the loss's backward op.
        auto seed = scaler_.enabled() ? scaler_.scale(backward_seed_).reshape(part.sizes()) : backward_seed_;
        if (weight != 1.0) seed = seed * weight;
        taped_->backward_taped(taped_loss_backward(seed, output, ys[i], saved, data_.schema), tape_,
                               /*keep_casts=*/i + 1 < xs.size(),
                               reduce ? [this](const at::Tensor& p) { reducer_->grad_ready(p); }
                                      : std::function<void(const at::Tensor&)>());
        if (reduce) reducer_->finish_taped();
      } else {
        scaled.backward(backward_seed_);
      }
    }
    if (probe) activation_peak_ = std::max(activation_peak_, probe->bytes());
    const auto value = part.detach();
    if (xs.size() == 1 && !group_)
      loss = value;  // the one part: its copy into step_values_ widens it, no cast of its own
    else if (i == 0)
      loss = weight == 1.0 ? value.to(at::kDouble) : value.to(at::kDouble).mul_(weight);
    else
      loss.add_(value, weight);
  }
  if (group_) {  // the processes' mean loss for the logs (on CUDA an all-reduce on the device)
    std::vector<at::Tensor> sum{loss};
    group_->all_reduce_sum_(sum);
    loss = sum[0].div_(static_cast<double>(group_->size()));
  }

  std::optional<PhaseScope> clip_phase(std::in_place, traced, "clip");
  scaler_.unscale_(*optimizer_);  // no-op without loss scaling
  at::Tensor grad_norm;  // undefined without clipping: last_grad_norm() computes it when asked
  if (opt_.clip_norm() > 0) grad_norm = optim::clip_grad_norm(module_->parameters(), opt_.clip_norm());
  write_step_values(loss, grad_norm);
  clip_phase.reset();
  PhaseScope phase(traced, "optimizer");
  scaler_.step(*optimizer_);
  scaler_.update();
  schedule_->step();
}

namespace {
// A one-element floating CPU tensor's value as a double: no dispatcher call (item()
// is one, and a host read that the sync count of tests/train counts).
double cpu_scalar(const at::Tensor& t) {
  TORCH_CHECK(t.numel() == 1, "cpu_scalar: expected one element, got ", t.numel());
  return AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, t.scalar_type(), "cpu_scalar",
                                         [&] { return static_cast<double>(*t.const_data_ptr<scalar_t>()); });
}
}  // namespace

void Run::write_step_values(const at::Tensor& loss, const at::Tensor& grad_norm) {
  if (unread_ == kUnreadRows) read_step_values();  // an observer's reads can move check_finite's
  if (!step_values_.defined())
    step_values_ = at::empty({kUnreadRows, 2}, at::TensorOptions().dtype(at::kDouble).device(device_));
  if (unread_ == 0) {
    unread_first_step_ = pos_.step + 1;
    // A step that computes no norm (no clipping) leaves its 0: finite for check_finite,
    // never shown. One fill per kUnreadRows steps rather than one a step (on CUDA a launch).
    step_values_.select(1, 1).zero_();
  }
  if (step_values_.is_cpu() && loss.is_cpu() && (!grad_norm.defined() || grad_norm.is_cpu())) {
    // On the CPU written in place: select, select and copy_ were three dispatcher
    // calls and a TensorIterator a step. From the end of backward to the optimizer,
    // 9.3 / 9.7 against 25.9 / 26.1 µs a step at batch 32 on the Intel Xeon (medians,
    // alternated runs, docs/performance.md). The same widening to double.
    double* row = step_values_.mutable_data_ptr<double>() + 2 * unread_;
    row[0] = cpu_scalar(loss);
    if (grad_norm.defined()) row[1] = cpu_scalar(grad_norm);
  } else {
    auto row = step_values_.select(0, unread_);
    row.select(0, 0).copy_(loss);
    if (grad_norm.defined()) row.select(0, 1).copy_(grad_norm);
  }
  ++unread_;
  grad_norm_known_ = false;
}

double Run::last_grad_norm() {
  read_step_values();
  if (!grad_norm_known_) {
    std::vector<at::Tensor> grads;
    for (const auto& p : module_->parameters())
      if (p.grad().defined()) grads.push_back(p.grad());
    grad_norm_ = grads.empty() ? 0.0 : kiln::ops::grad_norm(grads).item<double>();
    grad_norm_known_ = true;
  }
  return grad_norm_;
}

void Run::read_step_values() {
  if (unread_ == 0) return;
  const auto rows = step_values_.narrow(0, 0, unread_).cpu();  // the one host copy (a sync on CUDA)
  const auto* v = rows.const_data_ptr<double>();
  for (int64_t r = 0; r < unread_; ++r) {
    loss_ = v[2 * r];
    grad_norm_ = v[2 * r + 1];
    grad_norm_known_ = opt_.clip_norm() > 0;
    pos_.loss_since_eval += loss_;
    if (!non_finite_ && (!std::isfinite(loss_) || !std::isfinite(grad_norm_)))
      non_finite_ = NonFinite{unread_first_step_ + r, loss_, grad_norm_};
  }
  unread_ = 0;
}

// Reads the unread steps; an inf/NaN loss or gradient norm among them stops the run
// (fp32, bf16: with loss scaling the scaler skips such steps). Called before anything
// is written from the parameters (a log line, an evaluation, a checkpoint), so the
// last checkpoint is kept as it was; the parameters in memory may have taken the bad
// steps since, as the check waits for a read.
void Run::check_finite() {
  read_step_values();
  // NaN prints without the sign bit the arithmetic happened to leave on it.
  const auto shown = [](double v) { return std::isnan(v) ? std::string("nan") : c10::str(v); };
  if (!non_finite_ || plan_.loss_scaling) return;
  const auto& bad = *non_finite_;
  const bool now = bad.step == pos_.step;
  // The norm as the step had it: clipping computed it; else the last step's gradients give it.
  const std::string norm = opt_.clip_norm() > 0 ? c10::str(" (gradient norm ", shown(bad.grad_norm), ")")
                           : now                ? c10::str(" (gradient norm ", shown(last_grad_norm()), ")")
                                                : std::string();
  throw TrainingDiverged(c10::str(
      "the training loss became ", shown(bad.loss), norm, " at step ", bad.step,
      now ? std::string() : c10::str(" (read at step ", pos_.step, ": the values stay on the device between reads)"),
      "; ", now ? std::string() : c10::str("at step ", pos_.step, " "), "the model's first non-finite tensor is ",
      first_non_finite(*module_),
      ". Lower optim.lr, set optim.clip_norm, or check the data; the last checkpoint is kept"));
}

// Data-parallel: the processes' parameters must be equal after every step (the same
// start, the same averaged gradients). Checked once at the end against rank 0's: a
// difference means the replicas drifted (a bug, or a process that trained otherwise),
// and the run says so instead of saving one process's view as the truth.
void Run::check_replicas() {
  std::vector<at::Tensor> mine, theirs;
  for (const auto& p : module_->parameters()) {
    mine.push_back(p.detach());
    theirs.push_back(p.detach().clone());
  }
  group_->broadcast_(theirs, 0);
  double worst = 0.0;
  for (size_t i = 0; i < mine.size(); ++i)
    worst = std::max(worst, (mine[i] - theirs[i]).abs().max().item<double>());
  std::vector<at::Tensor> any{at::tensor({worst > 0 ? 1.0 : 0.0}, at::kDouble)};
  group_->all_reduce_sum_(any);
  const auto differing = static_cast<int64_t>(any[0].item<double>());
  if (differing > 0)
    throw std::runtime_error(c10::str("data-parallel: at step ", pos_.step, " the parameters of ", differing,
                                      " of ", group_->size(), " processes differ from rank 0's (by up to ", worst,
                                      " here): the replicas drifted apart"));
  log::info(c10::str("data-parallel: the ", group_->size(), " processes' parameters are identical at step ",
                     pos_.step));
}

// Data-parallel: each process scores its share of the test set, the sums added up.
EvalShard Run::eval_shard() const {
  if (!group_) return {};
  return {group_->rank(), group_->size(), [g = group_](at::Tensor& sums) {
            std::vector<at::Tensor> one{sums};
            g->all_reduce_sum_(one);
          }};
}

void Run::evaluate_now() {
  check_finite();  // pos_.loss_since_eval complete, and no evaluation of a diverged model
  PhaseScope phase(profiler_->recording(), "evaluate");
  module_->eval();
  const auto ev = evaluate([this](const at::Tensor& x) { return forward(x); }, data_.test.x,
                           data_.test.y, opt_.eval_batch_size(), device_, data_.schema, eval_shard());
  module_->train();
  const double elapsed = seconds_since(start_);
  const int64_t done = pos_.step - result_.resumed_from;
  EvalReport e{pos_.step, pos_.epoch + 1, opt_.epochs(),
               pos_.steps_since_eval ? pos_.loss_since_eval / pos_.steps_since_eval : 0.0, ev.loss,
               ev.metrics, trained_samples_ / std::max(elapsed, 1e-9), elapsed,
               done > 0 ? elapsed / done * (total_steps_ - pos_.step) : 0.0};
  nlohmann::ordered_json line = {{"split", "test"}, {"step", pos_.step}, {"epoch", pos_.epoch + 1},
                                 {"loss", ev.loss}};
  std::string logged;
  for (const auto& name : schema_metrics(data_.schema)) {
    line[name] = ev.metrics.at(name);
    logged += c10::str(" test_", name, " ", ev.metrics.at(name));
  }
  line["train_loss"] = e.train_loss;
  line["samples_per_s"] = e.samples_per_s;
  line["elapsed_s"] = elapsed;
  // The run's last evaluation also breaks accuracy down by class.
  result_.per_class_accuracy.clear();
  if (!ev.per_class_accuracy.empty() && pos_.epoch + 1 == opt_.epochs() && pos_.batch == batches_) {
    for (size_t c = 0; c < ev.per_class_accuracy.size(); ++c)
      result_.per_class_accuracy.emplace_back(data_.schema.classes[c], ev.per_class_accuracy[c]);
    line["per_class_accuracy"] = per_class_json(result_.per_class_accuracy);
  }
  // The last evaluation also measures a model of run-time depth at each depth (nn::DepthSampled).
  if (pos_.epoch + 1 == opt_.epochs() && pos_.batch == batches_) {
    result_.per_depth = evaluate_each_depth(*module_, [this](const at::Tensor& x) { return forward(x); },
                                            data_.test.x, data_.test.y, opt_.eval_batch_size(), device_,
                                            data_.schema, eval_shard());
    for (const auto& d : result_.per_depth) {
      auto& entry = line["per_depth"][std::to_string(d.depth)];
      entry["loss"] = d.loss;
      for (const auto& [name, value] : d.metrics) entry[name] = value;
    }
    if (!result_.per_depth.empty()) log::info(describe_depths(result_.per_depth));
  }
  if (pos_.step == recorded_eval_step_) {
    log::info(c10::str("evaluated step ", pos_.step, " again (test_loss ", ev.loss, logged,
                       "): the run's metrics already hold it"));
  } else {
    if (writes_) {
      metrics_->write(line);
      tb_->scalars("test", line);
    }
    log::info(c10::str("epoch ", pos_.epoch + 1, "/", opt_.epochs(), " step ", pos_.step,
                       " train_loss ", e.train_loss, " test_loss ", ev.loss, logged));
    observer_.on_eval(e);
  }
  result_.test_loss = ev.loss;
  result_.metrics = ev.metrics;
  result_.test_accuracy = ev.metrics.count("accuracy") ? ev.metrics.at("accuracy") : 0.0;
  result_.evaluated = true;
  evaluated_step_ = pos_.step;
  pos_.loss_since_eval = 0.0;
  pos_.steps_since_eval = 0;
}

void Run::save(bool with_metrics) {
  check_finite();  // every process: the position saved holds every step's loss
  if (saved_step_ == pos_.step || !writes_) return;
  PhaseScope phase(profiler_->recording(), "checkpoint");
  Metrics metrics;
  if (with_metrics && evaluated_step_ == pos_.step)
  {
    metrics = {{"test_loss", result_.test_loss}};
    for (const auto& [name, value] : result_.metrics) metrics["test_" + name] = value;
  }
  try {
    result_.last_checkpoint = checkpointer_->save(pos_, spec_.config_toml, metrics);
  } catch (const std::exception&) {
    if (run_dir_gone()) rescue_run_dir();  // deleted while the checkpoint was written
    throw;
  }
  saved_step_ = pos_.step;
  log::info(c10::str("checkpoint ", result_.last_checkpoint));
  observer_.on_checkpoint(result_.last_checkpoint, pos_.step);
}

// The run's config.toml and data.json, each replaced whole and synced.
void Run::write_run_files() {
  files::replace_synced((fs::path(spec_.run_dir) / "config.toml").string(), spec_.config_toml);
  files::replace_synced((fs::path(spec_.run_dir) / kDataFile).string(), schema_json_);
}

// Whether the run directory is no longer the one this run created: deleted, moved
// away, or another in its place. A stat per step; writes into a deleted directory
// would otherwise go on without an error, into files no one can open.
bool Run::run_dir_gone() const { return writes_ && files::file_id(spec_.run_dir) != run_dir_id_; }

// The run directory was deleted (or moved away) under the running job. What this
// process holds is the only copy of the training left, so it is saved into a new
// directory at the same path (config.toml, data.json, the checkpoint of this step)
// and the run stops, saying so: `--resume` continues it. A directory that another
// took the place of is not written into.
void Run::rescue_run_dir() {
  const std::string& dir = spec_.run_dir;
  if (fs::exists(dir))
    throw IoError(c10::str(dir, ": the run directory was replaced by another while the run trained "
                                "(at step ", pos_.step, "); stopped without writing into it"),
                  ENOENT);
  fs::create_directories(dir);
  run_dir_id_ = files::file_id(dir);
  write_run_files();
  log::open_file((fs::path(dir) / "train.log").string());
  const std::string what = c10::str(dir, ": the run directory was deleted (or moved away) while the run trained");
  log::warn(c10::str(what, " at step ", pos_.step, "; saving the step's state into a new one and stopping"));
  saved_step_ = -1;  // a checkpoint of this step, if any, went with the directory
  save(false);
  throw IoError(c10::str(what, ": made it again with the run's config.toml and the state of step ",
                         pos_.step, " (", result_.last_checkpoint, ") and stopped"),
                ENOENT);
}

void Run::report_memory() {
  if (reported_step_ == pos_.step || !writes_) return;
  reported_step_ = pos_.step;
  const auto r = memory_report(pos_.step, *optimizer_, device_,
                               activation_peak_ > 0 ? std::optional<int64_t>(activation_peak_)
                                                    : std::nullopt);
  memory_lines_->write(r.json());
  tb_->scalars("memory", r.json());
  observer_.on_memory(r);
}

TrainResult Run::run() {
  // Denormals flushed on every CPU thread of the run, the loader's worker (started
  // below, it inherits the mode) included; each thread's mode comes back at the end.
  const util::FlushDenormals flush(opt_.flush_denormals());
  // The resolved config goes into the run only once the run is known to start
  // (a refused resume leaves the directory as it was).
  if (writes_) write_run_files();
  // Resumed from an older checkpoint than the newest: what the run wrote after it
  // belongs to another trajectory and is set aside, so the run holds one.
  if (!spec_.resume_checkpoint.empty() && writes_) {
    result_.superseded_checkpoints = set_aside_after(spec_.run_dir, pos_.step);
    if (result_.superseded_checkpoints > 0)
      log::info(c10::str("set aside ", result_.superseded_checkpoints,
                         " checkpoint(s) after step ", pos_.step, " in ", kSupersededDir, "/"));
    // A checkpoint at an epoch's end: the loop evaluates its model first.
    if (pos_.batch == batches_ &&
        has_json_line((fs::path(spec_.run_dir) / "metrics.jsonl").string(), "test", pos_.step))
      recorded_eval_step_ = pos_.step;
  }
  {
    std::ostringstream s;
    int64_t parameters = 0;
    for (const auto& p : module_->parameters()) parameters += p.numel();
    s << *module_ << " | " << parameters << " parameters, " << data_.schema.format << " data, "
      << data::task_name(data_.schema.task) << ", " << data_.train.size() << " train / "
      << data_.test.size() << " test examples, ";
    if (data_.train_draws > 0) s << data_.train_draws << " drawn at random per epoch, ";
    s << batches_ << (batches_ == 1 ? " batch" : " batches") << " of "
      << std::min(batch_, loader_->examples()) << " per epoch";
    if (opt_.accumulate() > 1) s << " in " << opt_.accumulate() << " micro-batches";
    if (group_)
      s << " on each of " << group_->size() << " processes (data-parallel, rank " << group_->rank() << ")";
    const int threads = at::get_num_threads();
    s << ", " << spec_.optim.name << ", " << plan_.name << ", " << threads
      << (threads == 1 ? " thread" : " threads") << ", device " << device_;
    const auto& profile = spec_.profile;
    if (profile.first() > 0 && profile.last() > pos_.step) {
      if (profile.first() > total_steps_)
        s << "; profile.steps " << profile.first() << ":" << profile.last() << " lies after the run's "
          << total_steps_ << " steps: nothing is profiled";
      else
        s << ", profiling steps " << std::max(profile.first(), pos_.step + 1) << ".."
          << std::min(profile.last(), total_steps_) << " (RUN/profile/)";
    }
    log::info(s.str());
    log::info(heap::policy());
    if (device_.is_cpu() && plan_.dtype == at::kBFloat16) {
      const auto kind = ops::cpu_bf16_matmul();
      const bool routed = ops::linear_reduced_in_float32();  // products run as fp32 ones
      if (kind == ops::CpuBf16Matmul::kEmulated)
        log::warn(std::string("train.precision = \"bf16\" on a CPU without bf16 matrix instructions (AVX512-BF16 or "
                              "AMX-BF16): ") +
                  (routed ? "its matrix products and convolutions run as fp32 ones (operands cast up, each "
                            "result rounded to bf16 once), so bf16 saves no time here and its casts cost some"
                          : "its matrix products are emulated (KILN_CPU_REDUCED_PRODUCTS=native), many times "
                            "slower than fp32's (about 50x on an AVX2 EPYC)") +
                  "; fp32 is faster on this machine (docs/performance.md)");
      else if (kind == ops::CpuBf16Matmul::kAvx512Bf16OnePort)
        log::warn(std::string("train.precision = \"bf16\" on an Intel CPU with AVX512-BF16 but no AMX-BF16: it does "
                              "no more bf16 multiply-adds a cycle than fp32 ones (its bf16 matrix products ran at "
                              "about half fp32's speed on such a Xeon), ") +
                  (routed ? "so its matrix products and convolutions run as fp32 ones (operands cast up, each "
                            "result rounded to bf16 once) and bf16 saves no time here"
                          : "and KILN_CPU_REDUCED_PRODUCTS=native keeps them (the default MLP's step 0.61x fp32's)") +
                  "; fp32 is faster on this machine (docs/performance.md)");
    }
    observer_.on_start(s.str());
  }
  if (writes_) {
    metrics_.emplace((fs::path(spec_.run_dir) / "metrics.jsonl").string());
    tb_.emplace((fs::path(spec_.run_dir) / "tb").string());
    // A resumed run redoes the steps after its checkpoint: TensorBoard drops what an
    // earlier file holds from there on.
    if (!spec_.resume_checkpoint.empty()) tb_->restart(pos_.step + 1);
    memory_lines_.emplace((fs::path(spec_.run_dir) / "memory.jsonl").string());
  }
  // What setup freed (a data set's decoding buffers) goes back to the kernel; from here
  // on the heap keeps what a step frees for the next one (util/heap.h).
  heap::release_free_memory();
  start_ = window_start_ = Clock::now();
  module_->train();

  // A worker thread gathers the next batches while a step runs, in the loader's
  // order (data/prefetch.h); depth 0 gathers each one here instead. Auto (−1) is 0
  // on the CPU: there the gather is 1/40 of a step or less, and a worker beside the
  // step's OpenMP team cost the 2-core default run 3–9 % (docs/data.md, "The loader").
  const int64_t depth = opt_.prefetch() >= 0 ? opt_.prefetch() : device_.is_cpu() ? 0 : 2;
  // Host data is gathered on the host and copied to the device batch by batch.
  auto batch_options = data::PrefetchOptions().depth(depth).device(device_);
  if (augment_)  // on the worker, before the copy to the device
    batch_options.transform([a = *augment_](data::Batch b) { return data::augment(std::move(b), a); });
  data::PrefetchLoader batches(*loader_, batch_options);
  // A resume of a run that stopped at train.max_steps, with the same limit: no step
  // (the check after each step would let one more through).
  bool stopped = opt_.max_steps() > 0 && pos_.step >= opt_.max_steps();
  try {
    for (; pos_.epoch < opt_.epochs() && !stopped; ++pos_.epoch, pos_.batch = 0) {
      batches.start(pos_.epoch, pos_.batch);
      while (pos_.batch < batches_) {
        profiler_->begin_step(pos_.step + 1);
        // In the trace, each step is a scope named as PyTorch's profiler names them.
        std::optional<PhaseScope> step_scope;
        if (profiler_->recording()) step_scope.emplace(true, "ProfilerStep#" + std::to_string(pos_.step + 1));
        data::Batch batch;
        {
          PhaseScope phase(profiler_->recording(), "data");
          batch = batches.next();
        }
        int64_t examples = batch.x.size(0);
        try {
          step(batch);
          if (group_) examples *= group_->size();
        } catch (const c10::OutOfMemoryError& e) {
          throw std::runtime_error(describe_cuda_oom(
              e, batch_ / opt_.accumulate(),
              (fs::path(spec_.run_dir) / "oom_snapshot.pickle").string(), device_.index()));
        }
        ++pos_.step;
        ++pos_.batch;
        if (run_dir_gone()) rescue_run_dir();
        ++pos_.steps_since_eval;
        window_samples_ += examples;
        trained_samples_ += examples;
        const double elapsed = seconds_since(start_);
        const double lr = optimizer_->param_groups()[0].options().get_lr();
        StepReport r{pos_.step, total_steps_, pos_.epoch + 1, opt_.epochs(), pos_.batch, batches_,
                     lr, trained_samples_ / std::max(elapsed, 1e-9), elapsed,
                     elapsed / static_cast<double>(pos_.step - result_.resumed_from) *
                         (total_steps_ - pos_.step),
                     scaler_.skipped_steps(), [this] {
                       const double norm = last_grad_norm();
                       return std::pair{loss_, norm};
                     }};
        const bool log_step = pos_.step % opt_.log_every() == 0;
        if (log_step || pos_.step % kUnreadRows == 0) check_finite();
        if (log_step) {
          const double window_s = seconds_since(window_start_);
          nlohmann::ordered_json line = {{"split", "train"}, {"step", pos_.step}, {"epoch", pos_.epoch + 1},
                                         {"loss", loss_}, {"lr", lr}, {"grad_norm", last_grad_norm()},
                                         {"skipped_steps", scaler_.skipped_steps()},
                                         {"samples_per_s", window_samples_ / std::max(window_s, 1e-9)}};
          if (scaler_.enabled()) line["loss_scale"] = scaler_.scale();  // fp16's dynamic loss scale
          if (data::takes_tokens(data_.schema))  // a sequence model learns from every position
            line["tokens_per_s"] = line["samples_per_s"].get<double>() * data_.schema.input_shape[0];
          if (writes_) {
            metrics_->write(line);
            tb_->scalars("train", line);
          }
          window_start_ = Clock::now();
          window_samples_ = 0;
        }
        observer_.on_step(r);
        const auto& tb = spec_.tensorboard;
        if (tb.histogram_every() > 0 && pos_.step % tb.histogram_every() == 0) {
          check_finite();
          if (writes_) write_histograms(*tb_, *module_, pos_.step);
        }
        const bool epoch_end = pos_.batch == batches_;
        if (opt_.eval_every() > 0 && pos_.step % opt_.eval_every() == 0 && !epoch_end) {
          evaluate_now();
          if (!best_metric_.empty()) save(true);
        }
        // At an epoch's end the checkpoint waits for the evaluation below, so that its
        // manifest holds the test metrics (checkpoint.best ranks by them).
        if (checkpoint_due() && !epoch_end) save(true);
        const auto& mem = spec_.memory;
        if (mem.report_every() > 0 && pos_.step % mem.report_every() == 0) report_memory();
        if (device_.is_cuda() && mem.empty_cache_every() > 0 && pos_.step % mem.empty_cache_every() == 0)
          empty_cuda_cache();
        step_scope.reset();  // closed before the profiler may stop
        std::optional<ProfileReport> profile;
        try {
          profile = profiler_->end_step(pos_.step);
        } catch (const std::exception&) {
          if (run_dir_gone()) rescue_run_dir();  // deleted while the profile was written
          throw;
        }
        if (profile) observer_.on_profile(*profile);
        int stop = observer_.stop_requested();
        if (group_) {
          // One decision to stop: a signal that reached one process stops them all after this step.
          std::vector<at::Tensor> any{at::tensor({static_cast<double>(stop)}, at::kDouble)};
          group_->all_reduce_sum_(any);
          if (stop == 0 && any[0].item<double>() > 0) stop = SIGTERM;
        }
        if (stop) {
          result_.interrupted_by = stop;
          log::info(c10::str("signal ", result_.interrupted_by, ": stopping after step ", pos_.step));
          stopped = true;
          break;
        }
        if (opt_.max_steps() > 0 && pos_.step >= opt_.max_steps()) {
          stopped = true;
          break;
        }
      }
      if (pos_.batch < batches_) break;  // stopped mid-epoch: no evaluation
      evaluate_now();
      if (!best_metric_.empty() || checkpoint_due()) save(true);
    }
  } catch (const TrainingDiverged&) {
    throw;
  } catch (const c10::Error&) {
    throw;
  } catch (const InputError&) {
    throw;
  } catch (const IoError&) {
    throw;
  } catch (const fs::filesystem_error&) {
    throw;
  } catch (const std::exception& e) {
    // Data-parallel: a collective (the Reducer's, the loss's, the stop's, the
    // evaluation's) that failed because another process is gone.
    if (!group_) throw;
    throw std::runtime_error(dist::lost_peer_message(*group_, c10::str("step ", pos_.step + 1), e));
  }
  batches.stop();  // joins the worker, which may be waiting with a full queue
  if (auto profile = profiler_->finish(pos_.step)) observer_.on_profile(*profile);  // the run ended inside the window

  if (group_) check_replicas();
  result_.finished = pos_.epoch >= opt_.epochs();
  result_.steps = pos_.step;
  result_.skipped_steps = scaler_.skipped_steps();
  result_.seconds = seconds_since(start_);
  save(true);
  report_memory();
  if (writes_ && device_.is_cuda() && spec_.memory.history())
    write_cuda_memory_snapshot((fs::path(spec_.run_dir) / "memory_snapshot.pickle").string());
  log::close_file();
  return result_;
}

}  // namespace

std::optional<data::DataSchema> read_data_schema(const std::string& checkpoint_dir) {
  const auto text = read_checkpoint_file(checkpoint_dir, kDataFile);
  if (!text) return std::nullopt;
  const auto path = (fs::path(checkpoint_dir) / kDataFile).string();
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(c10::str(path, ": expected JSON, found text that does not parse (", e.what(), ")"));
  }
  return data::DataSchema::from_json(j, path);
}

TrainResult train(const RunSpec& spec, TrainObserver& observer) {
  Run run(spec, observer);
  return run.run();
}

}  // namespace kiln::train
