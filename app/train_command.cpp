// run_train(): resolves the config, prepares the run directory without touching
// an existing run, and hands typed options to lib/train.
#include "train_command.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <tuple>
#include <utility>

#include "config.h"
#include "console.h"
#include "dist/process_group.h"
#include "interrupt.h"
#include "summary_command.h"
#include "train/device.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/files.h"
#include "util/log.h"

namespace kiln::app {
namespace fs = std::filesystem;

train::RunSpec to_run_spec(const Config& c) {
  train::RunSpec spec;
  spec.data.format(c.data.format)
      .root(c.data.root)
      .train(c.data.train)
      .train_targets(c.data.train_targets)
      .test(c.data.test)
      .test_targets(c.data.test_targets)
      .test_fraction(c.data.test_fraction)
      .label(c.data.label)
      .features(c.data.features)
      .categorical(c.data.categorical)
      .task(c.data.task)
      .missing(c.data.missing)
      .unseen(c.data.unseen)
      .standardize(c.data.standardize)
      .delimiter(c.data.delimiter)
      .block_size(c.data.block_size)
      .stride(c.data.stride)
      .vocabulary(c.data.vocabulary)
      .windows(c.data.windows)
      .exclude(c.data.exclude)
      .augment_flip(c.data.augment_flip)
      .augment_crop(c.data.augment_crop)
      .train_limit(c.data.train_limit)
      .test_limit(c.data.test_limit)
      .seed(static_cast<uint64_t>(c.train.seed));
  spec.model.name = c.model.name;
  // The input and output sizes come from the data (lib/train sizes the model to it).
  const auto activation = nn::ActivationOptions(c.model.activation)
                              .sigmoid_beta(c.model.sigmoid_beta)
                              .sigmoid_grad_clip(c.model.sigmoid_grad_clip);
  spec.model.mlp = nn::MlpOptions(1, c.model.hidden, 1).dropout(c.model.dropout).activation(activation);
  spec.model.deep_mlp = nn::DeepMlpOptions(1, 1)
                            .layers(c.model.depth)
                            .width(c.model.width)
                            .activation(activation)
                            .dropout(c.model.dropout)
                            .checkpoint_every(c.model.checkpoint_every);
  spec.model.dynamic_mlp = nn::DynamicMlpOptions(1, 1)
                               .max_depth(c.model.depth)
                               .min_depth(c.model.min_depth)
                               .width(c.model.width)
                               .depth_sampling(c.model.depth_sampling)
                               .residual(c.model.residual)
                               .activation(activation)
                               .dropout(c.model.dropout)
                               .checkpoint_every(c.model.checkpoint_every);
  spec.model.convnet = nn::ConvNetOptions({1, 28, 28}, 1)
                          .channels(c.model.channels)
                          .pool_after(c.model.pool_after)
                          .hidden(c.model.head)
                          .dropout(c.model.dropout)
                          .channels_last(c.model.channels_last)
                          .activation(activation);
  spec.model.gpt = nn::GptOptions(1, 1)
                       .layers(c.model.blocks)
                       .width(c.model.embed)
                       .heads(c.model.heads)
                       .mlp_ratio(c.model.mlp_ratio)
                       .norm(c.model.norm)
                       .dropout(c.model.dropout)
                       .tie_embeddings(c.model.tie_embeddings)
                       .checkpoint_every(c.model.checkpoint_every);
  spec.optim = c.optim;  // unset keys stay unset: make_optimizer applies the optimizer's defaults
  spec.schedule.kind(c.schedule.name)
      .warmup_steps(c.schedule.warmup_steps)
      .min_lr_ratio(c.schedule.min_lr / *optim::resolve_defaults(c.optim).lr)
      .decay_fraction(c.schedule.decay_fraction);
  spec.train.epochs(c.train.epochs)
      .batch_size(c.train.batch_size)
      .accumulate(c.train.accumulate)
      .eval_batch_size(c.train.eval_batch_size)
      .eval_every(c.train.eval_every)
      .log_every(c.train.log_every)
      .max_steps(c.train.max_steps)
      .seed(static_cast<uint64_t>(c.train.seed))
      .threads(c.train.threads)
      .device(c.train.device)
      .precision(c.train.precision)
      .prefetch(c.train.prefetch)
      .data_on_device(c.train.data_on_device)
      .flush_denormals(c.train.flush_denormals)
      .clip_norm(c.optim.clip_norm);
  spec.checkpoint.every(c.checkpoint.every)
      .keep_last(c.checkpoint.keep_last)
      .best(c.checkpoint.best);
  spec.memory.report_every(c.memory.report_every)
      .fraction(c.memory.fraction)
      .empty_cache_every(c.memory.empty_cache_every)
      .history(c.memory.history);
  spec.profile = train::parse_profile_steps(c.profile.steps, "profile.steps");
  spec.profile.memory(c.profile.memory).shapes(c.profile.shapes).stack(c.profile.stack).top(c.profile.top);
  spec.tensorboard.histogram_every(c.tensorboard.histogram_every);
  spec.dist.global_batch(c.dist.batch == "global")
      .bucket_bytes(static_cast<int64_t>(c.dist.bucket_mb * (1 << 20)));
  return spec;
}

namespace {

// A run's claim on its directory: created exclusively (O_EXCL), so of two runs
// started together on one directory exactly one gets it. The process training the run
// also holds an flock(2) on it until it exits (RunLock).
constexpr const char* kRunMarker = ".kiln-run";

// Whether a run has trained in `dir` (what runs from before markers existed left).
bool has_trained(const fs::path& dir) {
  return fs::exists(dir / "checkpoints") || fs::exists(dir / "metrics.jsonl");
}

// The first of the names a run writes at its top level (docs/observability.md) that
// `dir` already holds though no run of kiln's is there (no marker, no metrics, no
// checkpoints): another program's file or the user's own (a config.toml kept beside
// their data), which the run would write over. Example: foreign_file("."): "config.toml".
std::optional<std::string> foreign_file(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;  // nothing there yet, or claim's to refuse
  if (has_trained(dir) || fs::exists(fs::symlink_status(dir / kRunMarker, ec))) return std::nullopt;  // kiln's run
  for (const char* name : {"config.toml", train::kDataFile, "memory.jsonl", "train.log", "tb", "profile",
                           train::kSupersededDir, "memory_snapshot.pickle", "oom_snapshot.pickle"})
    if (fs::exists(fs::symlink_status(dir / name, ec))) return std::string(name);
  return std::nullopt;
}

// A --run-dir that holds files the run would write over is refused (exit 2) before
// anything is written; kiln's own runs are told apart (claim, is_free).
void refuse_foreign_files(const fs::path& dir) {
  if (const auto name = foreign_file(dir))
    throw InputError(dir.string() + ": --run-dir: expected a new directory, an empty one or a run of kiln's, "
                     "found " + (dir / *name).string() + " there, which the run would write over; move it "
                     "away, or choose another --run-dir");
}

// What a marker holds: "pid N\n", N this process's.
std::string pid_line() { return "pid " + std::to_string(::getpid()) + "\n"; }

// The training process's hold on its run directory: an exclusive flock(2) on
// RUN/.kiln-run, kept while the process lives. The kernel lets go when the process
// ends, kill -9 included, so a marker nobody holds is a stopped run (the pid written
// in it could belong to another process by now). Two `--resume`s of one run would
// otherwise write the same checkpoint names and metrics, and each one's retention
// would delete the other's checkpoints.
class RunLock {
 public:
  RunLock() = default;
  RunLock(RunLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)), writable_(other.writable_) {}
  RunLock& operator=(RunLock&& other) noexcept {
    if (this != &other) {
      release();
      fd_ = std::exchange(other.fd_, -1);
      writable_ = other.writable_;
    }
    return *this;
  }
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock() { release(); }

  /// Locks the marker open on `fd` (this object owns fd from here on; `writable`: it
  /// was opened for writing): false when another process holds it. A file system
  /// without locks (ENOLCK, EINVAL, EOPNOTSUPP: some network mounts) cannot say, and
  /// the run goes on unlocked, as it did before locks.
  bool adopt(int fd, bool writable) {
    release();
    fd_ = fd;
    writable_ = writable;
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK) return true;
    release();
    return false;
  }

  /// "pid N" in the marker, rewritten in place (the lock stays on the same file);
  /// false with errno set when the marker cannot be written.
  bool write_pid() const {
    if (!writable_) {
      errno = EACCES;
      return false;
    }
    const std::string pid = pid_line();
    return ::ftruncate(fd_, 0) == 0 &&
           ::pwrite(fd_, pid.data(), pid.size(), 0) == static_cast<ssize_t>(pid.size()) && ::fsync(fd_) == 0;
  }

  bool held() const { return fd_ >= 0; }

 private:
  void release() {
    if (fd_ >= 0) ::close(fd_);  // closing the last descriptor drops the lock
    fd_ = -1;
  }
  int fd_ = -1;
  bool writable_ = false;
};

// The pid a marker names, for a message ("pid N", or "pid unknown").
std::string marker_pid(const fs::path& dir) {
  std::ifstream marker(dir / kRunMarker);
  std::string word;
  long long pid = 0;
  return marker >> word >> pid && word == "pid" && pid > 0 ? "pid " + std::to_string(pid) : "pid unknown";
}

// The lock of an existing run's directory for `--resume`, taken before its checkpoints
// are read; refused while another process trains the run. A directory where the marker
// can be neither opened nor created (read-only, from before markers) gives no lock:
// nothing can train there, and the run's first write names the fault. `create`: the
// marker may be created (not for --dry-run, which writes nothing).
RunLock lock_for_resume(const fs::path& dir, bool create = true) {
  int fd = create ? ::open((dir / kRunMarker).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644) : -1;
  const bool writable = fd >= 0;
  if (!writable) fd = ::open((dir / kRunMarker).c_str(), O_RDONLY | O_CLOEXEC);
  RunLock lock;
  if (fd < 0) return lock;
  if (!lock.adopt(fd, writable))
    throw InputError(dir.string() + ": --resume: expected a stopped run, found one still running (" +
                     marker_pid(dir) + ", holding " + (dir / kRunMarker).string() +
                     "); wait for it to finish, or stop it first");
  return lock;
}

// The console, and for a resumed run the marker rewritten to name this process once the
// run has started (its checkpoint loaded): where the marker cannot be written it keeps
// the pid it had, which only a refusal's message shows.
class RunObserver : public ConsoleObserver {
 public:
  RunObserver(ConsoleMode mode, bool warnings, const RunLock* lock)
      : ConsoleObserver(mode, warnings), lock_(lock) {}
  void on_start(const std::string& summary) override {
    if (lock_) lock_->write_pid();
    ConsoleObserver::on_start(summary);
  }

 private:
  const RunLock* lock_;
};

// The run directory a --resume argument names without reading its checkpoints: the
// run of RUN/checkpoints/step_N (a checkpoint: manifest.json), or the directory itself
// (config.toml); std::nullopt for 'latest' and anything else (resolve_resume() says
// what is wrong).
std::optional<fs::path> run_dir_named(const std::string& arg) {
  if (arg == "latest") return std::nullopt;
  fs::path p = fs::path(arg).lexically_normal();
  if (p.has_parent_path() && p.filename().empty()) p = p.parent_path();  // "dir/"
  if (fs::exists(p / "manifest.json")) {  // a checkpoint (which keeps a config.toml too)
    const fs::path parent = fs::absolute(p).parent_path();
    if (parent.filename() == "checkpoints" && fs::exists(parent.parent_path() / "config.toml"))
      return parent.parent_path();
    return std::nullopt;
  }
  if (fs::exists(p / "config.toml")) return p;
  return std::nullopt;
}

// A path with a name longer than a file system holds (NAME_MAX, 255 bytes) is the
// user's to fix (exit 2), said before anything looks at it: the first look (a status)
// had failed with the OS's words and exit 74.
void check_names(const std::string& path, const std::string& option) {
  constexpr size_t kNameMax = 255;
  for (const auto& part : fs::path(path)) {
    const auto& name = part.native();
    if (name.size() > kNameMax)
      throw ConfigError(option + " " + path.substr(0, 40) + "…: expected a path whose names are at most " +
                        std::to_string(kNameMax) + " bytes each, found one of " + std::to_string(name.size()) +
                        " bytes (" + name.substr(0, 16) + "…)");
  }
}

// Creates `dir` (and its parents) and claims it for this run: its marker, created
// exclusively and locked; std::nullopt when another run holds it already (its
// marker, or a run from before markers existed).
std::optional<RunLock> claim(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  // A path through a regular file, or one too long, is the user's to fix (exit 2); a
  // file system that refuses a good path (full, read-only) is the machine's (exit 74).
  if (ec == std::errc::not_a_directory || ec == std::errc::file_exists ||
      ec == std::errc::filename_too_long)
    throw InputError(dir.string() + ": cannot create the run directory: expected a path of "
                     "directories, found " + ec.message() + " (a file on the way, or a name too long)");
  if (ec) throw IoError(dir.string(), "create the run directory", ec.value());
  if (has_trained(dir) || foreign_file(dir)) return std::nullopt;
  const int fd = ::open((dir / kRunMarker).c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == EEXIST) return std::nullopt;
    throw IoError((dir / kRunMarker).string(), "create the run's marker", errno);
  }
  RunLock lock;
  if (!lock.adopt(fd, true)) return std::nullopt;  // a --resume of it got there first
  if (!lock.write_pid()) throw IoError((dir / kRunMarker).string(), "write the run's marker", errno);
  return lock;
}

// The overrides applied, validated, data paths made absolute, the device checked.
void complete(Config& config, const std::vector<std::string>& overrides) {
  for (const auto& o : overrides) apply_override(config, o);
  validate(config);
  // Data paths as given on this command line, made absolute in the run's config.toml,
  // so `--resume` from another directory reads the same files.
  for (auto* path : {&config.data.root, &config.data.train, &config.data.train_targets,
                     &config.data.test, &config.data.test_targets, &config.model.init_from})
    if (!path->empty() && fs::path(*path).is_relative()) {
      const std::string given = *path;
      *path = fs::absolute(*path).lexically_normal().string();
      // A relative path that leads nowhere: say from where it was taken (data.root's
      // reader says what the folder should hold).
      if (path != &config.data.root && !fs::exists(*path)) {
        const char* key = path == &config.data.train           ? "data.train"
                          : path == &config.data.train_targets ? "data.train_targets"
                          : path == &config.data.test          ? "data.test"
                          : path == &config.data.test_targets  ? "data.test_targets"
                                                               : "model.init_from";
        const auto it = config.origin.find(key);
        throw ConfigError((it == config.origin.end() ? std::string("default") : it->second) + ": " + key +
                          " = \"" + given + "\": expected a file or folder, found nothing at " + *path +
                          " (a relative path is taken from the working directory, " +
                          fs::current_path().string() + ")");
      }
    }
  try {  // the device exists (lib/train resolves it again when the run starts)
    train::resolve_device(config.train.device);
  } catch (const InputError& e) {
    const auto it = config.origin.find("train.device");
    throw ConfigError((it == config.origin.end() ? std::string("default") : it->second) + ": " +
                      e.what());
  }
}

// A new run's k-th choice of directory: run.dir/run.name, then run.name-2, run.name-3, …
fs::path candidate_run_dir(const Config& config, int k) {
  return fs::path(config.run.dir) / (k == 1 ? config.run.name : config.run.name + "-" + std::to_string(k));
}

// Whether a new run may claim `dir` (claim() would succeed), without touching it.
bool is_free(const fs::path& dir) {
  return !has_trained(dir) && !fs::exists(dir / kRunMarker) && !foreign_file(dir);
}

// A run killed before its first checkpoint: its config.toml is there, no complete
// checkpoint is. `--resume DIR` starts it again from step 0 — unless the process in
// its marker still runs (it has not died; it just has not saved yet).
bool started_without_checkpoint(const fs::path& dir) {
  return fs::is_directory(dir) && fs::exists(dir / "config.toml") && !fs::exists(dir / "manifest.json") &&
         !train::latest_checkpoint(dir.string());
}

// A file system that refused the run (a full disk, a read-only or deleted directory)
// stopped it: the message names the file and the reason, then what is kept and the
// command that continues the run once the cause is gone. Other errors pass as they are.
void rethrow_with_what_is_kept(const fs::path& run_dir) {
  int error = 0;
  std::string message;
  try {
    throw;
  } catch (const IoError& e) {
    error = e.error(), message = e.what();
  } catch (const fs::filesystem_error& e) {
    const IoError io(e);
    error = io.error(), message = io.what();
  } catch (...) {
    return;
  }
  std::optional<std::string> kept;
  try {
    kept = train::latest_checkpoint(run_dir.string());
  } catch (const std::exception&) {  // a directory that cannot be listed: nothing to say
    throw IoError(message, error);
  }
  if (!kept && !fs::exists(run_dir / "config.toml")) throw IoError(message, error);  // no run there
  const char* once = error == ENOSPC || error == EDQUOT ? "once there is space"
                     : error == EROFS || error == EACCES || error == EPERM
                         ? "once the run directory is writable"
                         : "once that is fixed";
  message += kept ? "\nkiln: the run's last complete checkpoint is " + *kept + "; " + once +
                        ", continue with: kiln train --resume " + run_dir.string()
                  : "\nkiln: the run has no complete checkpoint; " + std::string(once) +
                        ", start it again with: kiln train --resume " + run_dir.string();
  throw IoError(message, error);
}

}  // namespace

std::string default_config_path() {
  const std::string local = "configs/fashion_mlp.toml";
  if (fs::exists(local)) return local;
  return std::string(KILN_SOURCE_DIR) + "/" + local;
}

Config resolve_config(const std::string& config_path, const std::vector<std::string>& overrides) {
  Config config = load_config(config_path.empty() ? default_config_path() : config_path);
  complete(config, overrides);
  return config;
}

namespace {

// The run's outcome as the last JSON line of --log-format=json.
void print_json_result(const train::TrainResult& result, const fs::path& run_dir, const char* why,
                       const std::vector<std::string>& resume_changes) {
  nlohmann::ordered_json fields = {{"run_dir", run_dir.string()}, {"steps", result.steps},
                                   {"finished", result.finished}, {"seconds", result.seconds},
                                   {"resumed_from", result.resumed_from},
                                   {"resume_changes", resume_changes},
                                   {"last_checkpoint", result.last_checkpoint},
                                   {"skipped_steps", result.skipped_steps}};
  fields["stopped_by"] = why ? nlohmann::ordered_json(why) : nlohmann::ordered_json();
  if (result.evaluated) {
    fields["test_loss"] = result.test_loss;
    for (const auto& [name, value] : result.metrics) fields["metrics"][name] = value;
    if (!result.per_class_accuracy.empty())
      fields["per_class_accuracy"] = train::per_class_json(result.per_class_accuracy);
    for (const auto& d : result.per_depth) {
      auto& entry = fields["per_depth"][std::to_string(d.depth)];
      entry["loss"] = d.loss;
      for (const auto& [name, value] : d.metrics) entry[name] = value;
    }
  }
  print_json_event("result", fields);
}

}  // namespace

int run_train(const TrainCommand& cmd) {
  const auto mode = console_mode(cmd.quiet, cmd.log_format, isatty(fileno(stdout)));
  // Data-parallel (torchrun sets WORLD_SIZE): rank 0 claims, locks and writes the run;
  // the others only train, quiet.
  const auto dist_env = dist::env_from_environment();
  const bool follower = dist_env && dist_env->rank > 0;
  Config config;
  fs::path run_dir;
  train::ResumeTarget resume;
  RunLock lock;  // the writer's hold on the run directory while this command runs
  bool restarting = false;  // --resume of a run killed before its first checkpoint
  std::vector<std::string> resume_changes;  // --set on --resume: "optim.lr 0.001 → 0.01"
  check_names(cmd.run_dir, "--run-dir");
  check_names(cmd.resume_dir, "--resume");
  if (!cmd.resume_dir.empty()) {
    if (!cmd.config_path.empty())
      throw ConfigError("--resume " + cmd.resume_dir + ": the run's own config.toml is used; "
                        "give --set overrides instead of a CONFIG file (" + cmd.config_path + ")");
    if (!cmd.run_dir.empty())
      throw ConfigError("--resume " + cmd.resume_dir + " continues that run in its own directory; "
                        "--run-dir " + cmd.run_dir + " cannot be given with it");
    // The run is locked before its checkpoints are read: one still training is refused
    // (--dry-run too, as the command itself would be), and its retention cannot delete a
    // checkpoint while this command lists them.
    const bool locks = !cmd.print_config && !follower;
    const bool create = !cmd.dry_run;
    const auto named = run_dir_named(cmd.resume_dir);
    // A checkpoints/ that is no directory: refused before the resume sets anything aside.
    if (named) train::require_checkpoints_dir(named->string());
    if (locks && named) lock = lock_for_resume(*named, create);
    if (started_without_checkpoint(cmd.resume_dir)) {
      resume = {cmd.resume_dir, ""};  // from step 0, in its own directory, with its own config
      restarting = true;
    } else {
      resume = train::resolve_resume(cmd.resume_dir, Config{}.run.dir);
      if (locks && !lock.held() && !resume.run_dir.empty() && fs::exists(fs::path(resume.run_dir) / "config.toml")) {
        lock = lock_for_resume(resume.run_dir, create);  // 'latest': the run it found
        if (cmd.resume_dir == "latest") resume = train::resolve_resume(resume.run_dir, Config{}.run.dir);
      }
    }
    run_dir = resume.run_dir;
    if (run_dir.empty()) {  // a checkpoint directory outside a run's checkpoints/
      const auto where = fs::absolute(resume.checkpoint_dir).lexically_normal().parent_path();
      const bool aside = where.filename() == train::kSupersededDir;
      throw ConfigError(
          resume.checkpoint_dir + ": --resume: expected a checkpoint in a run's checkpoints/ folder "
          "(RUN/checkpoints/step_N), found one in " + where.string() + "/" +
          (aside ? " (set aside when the run was resumed from an earlier step: a resume goes on with the "
                   "run's own checkpoints)"
                 : "") +
          "; to train on from its weights in a new run: kiln train CONFIG --set model.init_from=\"" +
          resume.checkpoint_dir + "\"");
    }
    if (!fs::exists(run_dir / "config.toml"))
      throw ConfigError(run_dir.string() + ": --resume: expected a run directory with "
                        "config.toml, found none");
    config = load_config((run_dir / "config.toml").string());
    const Config before = config;
    complete(config, cmd.overrides);
    resume_changes = changed_settings(before, config);
    // What a checkpoint's state is made for: another model, optimizer or schedule cannot
    // take it (the load would refuse it file by file); say so by the key, and the way on.
    // (A run restarted from step 0 has no checkpoint to hold it to.)
    if (!restarting)
      for (const auto& [key, was, now] : {std::tuple{"model.name", before.model.name, config.model.name},
                                          std::tuple{"optim.name", before.optim.name, config.optim.name},
                                          std::tuple{"schedule.name", before.schedule.name, config.schedule.name}})
        if (was != now)
          throw ConfigError(std::string("--set: ") + key + ": expected the run's \"" + was +
                            "\" on --resume (its checkpoints hold state made for it), found \"" + now +
                            "\"; to go on from these weights with " + now + ", start a new run: kiln train CONFIG "
                            "--set model.init_from=\"" + run_dir.string() + "\" --set " + key + "=" + now);
  } else {
    config = resolve_config(cmd.config_path, cmd.overrides);
  }
  const std::string resolved = to_toml(config);
  if (cmd.print_config) {
    std::fputs(resolved.c_str(), stdout);
    return 0;
  }
  if (cmd.dry_run) {
    // The directory the run would claim, found as below but without creating or
    // claiming anything; then the summary of what it would train.
    std::string would;
    if (!cmd.resume_dir.empty()) {
      would = restarting ? "would start " + run_dir.string() + " again from step 0 (stopped before its first checkpoint)"
                         : "would continue in " + run_dir.string() + " from " + resume.checkpoint_dir +
                               (resume_changes.empty() ? "" : " with " + c10::Join(", ", resume_changes));
    } else if (!cmd.run_dir.empty()) {
      refuse_foreign_files(cmd.run_dir);
      if (!is_free(cmd.run_dir))
        throw ConfigError(cmd.run_dir + ": already holds a run; continue it with --resume " + cmd.run_dir +
                          ", or choose another --run-dir");
      would = "run directory " + cmd.run_dir;
    } else {
      fs::path dir = candidate_run_dir(config, 1);
      for (int k = 2; !is_free(dir); ++k) dir = candidate_run_dir(config, k);
      would = "run directory " + dir.string();
    }
    print_summary(to_run_spec(config), "kiln train --dry-run: " + would + " (nothing written)");
    return 0;
  }

  const auto out = follower ? ConsoleMode::kQuiet : mode;

  // A new run claims its directory atomically (claim()); a resumed one has its own.
  bool existed = true;  // whether the run directory was there before this command
  if (follower) {
    if (cmd.resume_dir.empty()) run_dir = cmd.run_dir.empty() ? fs::path(config.run.dir) / config.run.name : fs::path(cmd.run_dir);
  } else if (restarting) {
    // What the killed run wrote (metrics, memory lines) is set aside, not mixed in, and
    // the directory's marker names this process now.
    train::set_aside_after(run_dir.string(), 0);
    if (fs::exists(run_dir / "tb")) {  // its TensorBoard events too, beside the checkpoints set aside
      fs::path aside = run_dir / train::kSupersededDir / "tb";
      for (int k = 2; fs::exists(aside); ++k) aside = run_dir / train::kSupersededDir / ("tb-" + std::to_string(k));
      fs::create_directories(aside.parent_path());
      fs::rename(run_dir / "tb", aside);
    }
    if (!lock.write_pid()) {  // no lock, or a marker it cannot write: a new marker, locked
      files::replace_synced((run_dir / kRunMarker).string(), pid_line());
      lock = lock_for_resume(run_dir);
    }
    if (out != ConsoleMode::kQuiet && out != ConsoleMode::kJson)
      std::printf("kiln train: %s holds a run stopped before its first checkpoint: starting it again from "
                  "step 0 with its config.toml\n", run_dir.c_str());
  } else if (cmd.resume_dir.empty() && !cmd.run_dir.empty()) {
    run_dir = cmd.run_dir;  // named explicitly: never reuse a directory that holds a run
    existed = fs::exists(run_dir);
    refuse_foreign_files(run_dir);
    auto claimed = claim(run_dir);
    if (!claimed)
      throw ConfigError(run_dir.string() + ": already holds a run; continue it with --resume " +
                        run_dir.string() + ", or choose another --run-dir");
    lock = std::move(*claimed);
  } else if (cmd.resume_dir.empty()) {
    // run.dir/run.name, or the first free run.name-2, run.name-3, … beside it.
    run_dir = candidate_run_dir(config, 1);
    for (int k = 2;; ++k) {
      existed = fs::exists(run_dir);
      if (auto claimed = claim(run_dir)) {
        lock = std::move(*claimed);
        break;
      }
      run_dir = candidate_run_dir(config, k);
    }
  }
  if (out == ConsoleMode::kJson)
    print_json_event("run", {{"run_dir", run_dir.string()}, {"config", resolved}});
  else if (out != ConsoleMode::kQuiet)
    std::printf("kiln train: run directory %s\n%s\n", run_dir.c_str(), resolved.c_str());

  auto spec = to_run_spec(config);
  spec.run_dir = run_dir.string();
  spec.config_toml = resolved;
  spec.resume_checkpoint = resume.checkpoint_dir;
  spec.resume_changes = resume_changes;
  spec.init_from = config.model.init_from;
  // rank 0's console says the warnings for all; a resumed run's marker names this
  // process once the checkpoint has loaded (a refused checkpoint leaves it as it was)
  RunObserver console(out, /*warnings=*/!follower,
                      !cmd.resume_dir.empty() && !restarting ? &lock : nullptr);
  train::TrainResult result;
  try {
    std::unique_ptr<dist::Group> group;
    if (dist_env) {  // torchrun, even with one process (a 1-process NCCL check on a GPU)
      group = std::make_unique<dist::Group>(*dist_env, std::chrono::seconds(config.dist.timeout_s),
                                            config.train.device != "cpu");
      spec.group = group.get();
    }
    result = train::train(spec, console);
  } catch (...) {
    // A run that failed before it trained (bad data, a refused checkpoint) leaves
    // the directory as it found it: the claim and what the start wrote go (none of
    // these names was there before it: refuse_foreign_files), and a directory this
    // command created goes too, so that the same --run-dir can be given again.
    if (!follower && cmd.resume_dir.empty() && !has_trained(run_dir)) {
      log::close_file();
      std::error_code ec;
      fs::remove(run_dir / kRunMarker, ec);
      for (const char* file : {"train.log", "config.toml", train::kDataFile})
        fs::remove(run_dir / file, ec);
      if (!existed) fs::remove(run_dir, ec);  // only when empty
    }
    if (!follower) rethrow_with_what_is_kept(run_dir);
    throw;
  }
  const char* why = result.interrupted_by ? InterruptGuard::name(result.interrupted_by)
                    : result.finished     ? nullptr
                                          : "train.max_steps";
  const int exit_code = result.interrupted_by ? InterruptGuard::exit_code(result.interrupted_by) : 0;
  if (follower) return exit_code;
  if (mode == ConsoleMode::kJson) {
    print_json_result(result, run_dir, why, resume_changes);
    return exit_code;
  }
  if (result.resumed_from > 0 && result.finished && result.steps == result.resumed_from)
    std::printf("resumed at step %lld, where the run had already finished its %lld epoch(s): nothing "
                "to train (--set train.epochs=N trains on to N)\n",
                static_cast<long long>(result.resumed_from), static_cast<long long>(config.train.epochs));
  else if (result.resumed_from > 0 && !result.interrupted_by && result.steps == result.resumed_from &&
           config.train.max_steps > 0 && result.steps >= config.train.max_steps)
    std::printf("resumed at step %lld, where the run had already reached train.max_steps = %lld: nothing to "
                "train (--set train.max_steps=N trains on to step N, 0 to the last epoch)\n",
                static_cast<long long>(result.resumed_from), static_cast<long long>(config.train.max_steps));
  else if (result.resumed_from > 0)
    std::printf("resumed at step %lld%s%s\n", static_cast<long long>(result.resumed_from),
                resume_changes.empty() ? "" : " with ", c10::Join(", ", resume_changes).c_str());
  if (result.superseded_checkpoints > 0)
    std::printf("set aside %lld later checkpoint(s) and their metrics lines in %s/%s/ and "
                "*.superseded.jsonl\n",
                static_cast<long long>(result.superseded_checkpoints), run_dir.c_str(),
                train::kSupersededDir);
  if (result.evaluated) {
    const auto& m = result.metrics;
    char measured[96];
    if (m.count("bits_per_char") || m.count("bits_per_byte")) {
      const bool chars = m.count("bits_per_char") > 0;
      std::snprintf(measured, sizeof measured, "test %.4f bits per %s, accuracy %.2f%%",
                    m.at(chars ? "bits_per_char" : "bits_per_byte"), chars ? "character" : "byte",
                    100.0 * m.at("accuracy"));
    } else if (m.count("accuracy"))
      std::snprintf(measured, sizeof measured, "test accuracy %.2f%%", 100.0 * m.at("accuracy"));
    else
      std::snprintf(measured, sizeof measured, "test RMSE %.4g, R² %.4f", m.at("rmse"), m.at("r2"));
    std::printf("%s %s (test loss %.4f) after %lld steps, %s; checkpoint %s\n",
                why ? "last" : "final", measured, result.test_loss,
                static_cast<long long>(result.steps), format_duration(result.seconds).c_str(),
                result.last_checkpoint.c_str());
    if (!result.per_class_accuracy.empty() && result.per_class_accuracy.size() <= 20) {
      std::printf("test accuracy by class:");
      for (const auto& [name, acc] : result.per_class_accuracy) {
        const std::string shown = printable(name);  // a data file's bytes: no escape sequences
        if (std::isnan(acc)) std::printf("  %s -", shown.c_str());
        else std::printf("  %s %.1f%%", shown.c_str(), 100.0 * acc);
      }
      std::printf("\n");
    }
    if (!result.per_depth.empty()) {
      std::printf("test %s by depth:", m.count("accuracy") ? "accuracy" : "loss");
      for (const auto& d : result.per_depth) {
        const auto depth = static_cast<long long>(d.depth);
        if (d.metrics.count("accuracy")) std::printf("  %lld %.2f%%", depth, 100.0 * d.metrics.at("accuracy"));
        else std::printf("  %lld %.4f", depth, d.loss);
      }
      std::printf("\n");
    }
  }
  if (why && !(result.resumed_from > 0 && result.steps == result.resumed_from && !result.interrupted_by))
    std::printf("stopped after %lld steps (%s), %s; continue with: kiln train --resume %s\n",
                static_cast<long long>(result.steps), why, format_duration(result.seconds).c_str(),
                run_dir.c_str());
  if (result.skipped_steps > 0)
    std::printf("%lld steps skipped for inf/NaN gradients (fp16 loss scaling)\n",
                static_cast<long long>(result.skipped_steps));
  return exit_code;
}

}  // namespace kiln::app
