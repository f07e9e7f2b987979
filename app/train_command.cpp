// run_train(): resolves the config, prepares the run directory without touching
// an existing run, and hands typed options to lib/train.
#include "train_command.h"

#include <torch/cuda.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "config.h"
#include "console.h"
#include "train/trainer.h"

namespace kiln::app {
namespace fs = std::filesystem;
namespace {

train::RunSpec to_spec(const Config& c) {
  train::RunSpec spec;
  spec.data.root(c.data.root).train_limit(c.data.train_limit).test_limit(c.data.test_limit);
  spec.model = nn::MlpOptions(784, c.model.hidden, 10).dropout(c.model.dropout);
  spec.optim = optim::AdamWOptions(c.optim.lr)
                   .weight_decay(c.optim.weight_decay)
                   .beta1(c.optim.beta1)
                   .beta2(c.optim.beta2)
                   .eps(c.optim.eps);
  spec.train.epochs(c.train.epochs)
      .batch_size(c.train.batch_size)
      .eval_batch_size(c.train.eval_batch_size)
      .log_every(c.train.log_every)
      .checkpoint_every(c.train.checkpoint_every)
      .max_steps(c.train.max_steps)
      .seed(static_cast<uint64_t>(c.train.seed))
      .threads(c.train.threads)
      .device(c.train.device);
  return spec;
}

bool holds_a_run(const fs::path& dir) {
  return fs::exists(dir / "checkpoints") || fs::exists(dir / "metrics.jsonl");
}

}  // namespace

std::string default_config_path() {
  const std::string local = "configs/fashion_mlp.toml";
  if (fs::exists(local)) return local;
  return std::string(KILN_SOURCE_DIR) + "/" + local;
}

int run_train(const TrainCommand& cmd) {
  Config config;
  fs::path run_dir;
  if (!cmd.resume_dir.empty()) {
    if (!cmd.config_path.empty())
      throw ConfigError("--resume " + cmd.resume_dir + ": the run's own config.toml is used; "
                        "give --set overrides instead of a CONFIG file (" + cmd.config_path + ")");
    run_dir = cmd.resume_dir;
    if (!fs::exists(run_dir / "config.toml"))
      throw ConfigError(cmd.resume_dir + ": --resume: expected a run directory with config.toml, "
                        "found none");
    config = load_config((run_dir / "config.toml").string());
  } else {
    config = load_config(cmd.config_path.empty() ? default_config_path() : cmd.config_path);
  }
  for (const auto& o : cmd.overrides) apply_override(config, o);
  validate(config);
  if (config.train.device != "cpu" && !torch::cuda::is_available()) {
    const auto it = config.origin.find("train.device");
    throw ConfigError((it == config.origin.end() ? std::string("default") : it->second) +
                      ": train.device: expected cpu (no CUDA device is visible), found \"" +
                      config.train.device + "\"");
  }
  const std::string resolved = to_toml(config);
  if (cmd.print_config) {
    std::fputs(resolved.c_str(), stdout);
    return 0;
  }

  if (cmd.resume_dir.empty() && !cmd.run_dir.empty()) {
    run_dir = cmd.run_dir;  // named explicitly: never reuse a directory that holds a run
    if (holds_a_run(run_dir))
      throw ConfigError(run_dir.string() + ": already holds a run; continue it with --resume " +
                        run_dir.string() + ", or choose another --run-dir");
  } else if (cmd.resume_dir.empty()) {
    // run.dir/run.name, or the first free run.name-2, run.name-3, … beside it.
    run_dir = fs::path(config.run.dir) / config.run.name;
    for (int k = 2; holds_a_run(run_dir); ++k)
      run_dir = fs::path(config.run.dir) / (config.run.name + "-" + std::to_string(k));
  }
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) throw InputError(run_dir.string() + ": cannot create the run directory: " + ec.message());
  std::printf("kiln train: run directory %s\n%s\n", run_dir.c_str(), resolved.c_str());

  auto spec = to_spec(config);
  spec.run_dir = run_dir.string();
  spec.config_toml = resolved;
  spec.resume = !cmd.resume_dir.empty();
  ConsoleObserver console(isatty(fileno(stdout)));
  const auto result = train::train(spec, console);
  if (result.resumed_from > 0)
    std::printf("resumed at step %lld\n", static_cast<long long>(result.resumed_from));
  if (result.evaluated)
    std::printf("final test accuracy %.2f%% (test loss %.4f) after %lld steps, %s; checkpoint %s\n",
                100.0 * result.test_accuracy, result.test_loss,
                static_cast<long long>(result.steps), format_duration(result.seconds).c_str(),
                result.last_checkpoint.c_str());
  else
    std::printf("stopped after %lld steps (train.max_steps) before an evaluation, %s; checkpoint %s\n",
                static_cast<long long>(result.steps), format_duration(result.seconds).c_str(),
                result.last_checkpoint.c_str());
  return 0;
}

}  // namespace kiln::app
