// train(): the loop. Every position in it is a pure function of (seed, step), so a
// run that resumes from a checkpoint continues exactly where it stopped.
#include "train/trainer.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "data/fashion_mnist.h"
#include "data/loader.h"
#include "ops/ops.h"
#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "util/error.h"
#include "util/json_lines.h"
#include "util/log.h"

namespace kiln::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

TrainResult train(const RunSpec& spec, TrainObserver& observer) {
  const auto& opt = spec.train;
  if (opt.threads() > 0) at::set_num_threads(static_cast<int>(opt.threads()));
  torch::manual_seed(opt.seed());
  const torch::Device device(opt.device());
  std::filesystem::create_directories(spec.run_dir);
  log::open_file((std::filesystem::path(spec.run_dir) / "train.log").string());

  // Data: normalised with the training set's own statistics.
  const auto train_set = data::load_fashion_mnist(spec.data.root(), data::Split::kTrain,
                                                  spec.data.train_limit());
  const auto test_set =
      data::load_fashion_mnist(spec.data.root(), data::Split::kTest, spec.data.test_limit());
  const auto norm = data::pixel_statistics(train_set.images);
  const auto x_train = data::normalize_images(train_set.images, norm).to(device);  // (N, 784)
  const auto y_train = train_set.labels.to(device);                                // (N)
  const auto x_test = data::normalize_images(test_set.images, norm);
  const auto y_test = test_set.labels;
  TORCH_CHECK(x_train.size(1) == spec.model.in_features(), "model.in_features is ",
              spec.model.in_features(), " but the images have ", x_train.size(1), " pixels");
  data::BatchLoader loader(x_train, y_train, opt.batch_size(), /*shuffle=*/true, opt.seed());

  nn::Mlp model(spec.model);
  model->to(device);
  optim::AdamW optimizer(model->parameters(), spec.optim);

  Checkpointer checkpointer(spec.run_dir, *model, optimizer);
  TrainPosition pos;
  pos.shuffle_seed = opt.seed();
  TrainResult result;
  if (spec.resume) {
    const auto ckpt = latest_checkpoint(spec.run_dir);
    if (!ckpt)
      throw InputError(c10::str(spec.run_dir, ": --resume: expected a run directory with a "
                                "checkpoint under checkpoints/, found none"));
    pos = checkpointer.load(*ckpt);
    result.resumed_from = pos.step;
    log::info(c10::str("resumed from ", *ckpt, " at step ", pos.step));
  }

  // The resolved config goes into the run only once the run is known to start
  // (a refused resume leaves the directory as it was).
  {
    const auto path = std::filesystem::path(spec.run_dir) / "config.toml";
    std::ofstream out(path, std::ios::trunc);
    out << spec.config_toml;
    if (!out) throw InputError(c10::str(path.string(), ": cannot write"));
  }

  const int64_t batches = loader.size();
  int64_t total_steps = opt.epochs() * batches;
  if (opt.max_steps() > 0) total_steps = std::min(total_steps, opt.max_steps());
  {
    std::ostringstream s;
    s << *model << " | " << x_train.size(0) << " train / " << x_test.size(0) << " test images, "
      << batches << " batches of " << opt.batch_size() << " per epoch, " << at::get_num_threads()
      << " threads, device " << device;
    log::info(s.str());
    observer.on_start(s.str());
  }

  JsonLines metrics((std::filesystem::path(spec.run_dir) / "metrics.jsonl").string());
  const auto forward = [&](const at::Tensor& x) { return model->forward(x); };
  const auto start = Clock::now();
  auto window_start = start;
  int64_t window_samples = 0, trained_samples = 0;
  int64_t step = pos.step;

  int64_t saved_step = -1, evaluated_step = -1;
  auto checkpoint = [&] {
    TrainPosition now{step, pos.epoch, pos.batch, pos.shuffle_seed};
    saved_step = step;
    Metrics metrics;  // the evaluation of this very step, when there was one
    if (evaluated_step == step)
      metrics = {{"test_loss", result.test_loss}, {"test_accuracy", result.test_accuracy}};
    result.last_checkpoint = checkpointer.save(now, spec.config_toml, metrics);
    log::info(c10::str("checkpoint ", result.last_checkpoint));
    observer.on_checkpoint(result.last_checkpoint, step);
  };

  bool stopped = false;
  for (; pos.epoch < opt.epochs() && !stopped; ++pos.epoch, pos.batch = 0) {
    loader.set_epoch(pos.epoch);
    model->train();
    double epoch_loss = 0.0;
    int64_t epoch_steps = 0;
    const auto epoch_start = Clock::now();
    int64_t epoch_samples = 0;
    while (pos.batch < batches) {
      const auto batch = loader.batch(pos.batch);
      optimizer.zero_grad();
      const auto logits = model->forward(batch.x);  // (B, 10)
      const auto loss = kiln::ops::cross_entropy(logits, batch.y);
      loss.backward();
      optimizer.step();
      ++step;
      ++pos.batch;
      const double loss_value = loss.item<double>();
      if (!std::isfinite(loss_value))
        throw std::runtime_error(c10::str("the training loss became ", loss_value, " at step ",
                                          step, "; lower optim.lr or check the data"));
      epoch_loss += loss_value;
      ++epoch_steps;
      window_samples += batch.x.size(0);
      epoch_samples += batch.x.size(0);
      trained_samples += batch.x.size(0);

      StepReport r{step, total_steps, pos.epoch + 1, opt.epochs(), pos.batch, batches, loss_value,
                   optimizer.param_groups()[0].options().get_lr(), 0.0, seconds_since(start), 0.0};
      r.samples_per_s = trained_samples / std::max(r.elapsed_s, 1e-9);
      r.eta_s = r.elapsed_s / static_cast<double>(step - result.resumed_from) * (total_steps - step);
      if (step % opt.log_every() == 0) {
        const double window_s = seconds_since(window_start);
        metrics.write({{"split", "train"}, {"step", step}, {"epoch", pos.epoch + 1},
                       {"loss", loss_value}, {"lr", r.lr},
                       {"samples_per_s", window_samples / std::max(window_s, 1e-9)}});
        window_start = Clock::now();
        window_samples = 0;
      }
      observer.on_step(r);
      if (opt.checkpoint_every() > 0 && step % opt.checkpoint_every() == 0) checkpoint();
      if (opt.max_steps() > 0 && step >= opt.max_steps()) {
        stopped = true;
        break;
      }
    }
    if (stopped && pos.batch < batches) break;  // mid-epoch stop: no evaluation

    model->eval();
    const auto ev = evaluate(forward, x_test, y_test, opt.eval_batch_size(), device);
    const double elapsed = seconds_since(start);
    const double rate = epoch_samples / std::max(seconds_since(epoch_start), 1e-9);
    const int64_t left = total_steps - step;
    EvalReport e{step, pos.epoch + 1, opt.epochs(), epoch_steps ? epoch_loss / epoch_steps : 0.0,
                 ev.loss, ev.accuracy, rate, elapsed,
                 step > result.resumed_from
                     ? elapsed / static_cast<double>(step - result.resumed_from) * left
                     : 0.0};
    metrics.write({{"split", "test"}, {"step", step}, {"epoch", pos.epoch + 1}, {"loss", ev.loss},
                   {"accuracy", ev.accuracy}, {"train_loss", e.train_loss},
                   {"samples_per_s", rate}, {"elapsed_s", elapsed}});
    log::info(c10::str("epoch ", pos.epoch + 1, "/", opt.epochs(), " step ", step,
                       " train_loss ", e.train_loss, " test_loss ", ev.loss, " test_accuracy ",
                       ev.accuracy));
    observer.on_eval(e);
    result.test_loss = ev.loss;
    result.test_accuracy = ev.accuracy;
    result.evaluated = true;
    evaluated_step = step;
  }

  result.finished = pos.epoch >= opt.epochs();
  result.steps = step;
  result.seconds = seconds_since(start);
  if (saved_step != step) checkpoint();
  log::close_file();
  return result;
}

}  // namespace kiln::train
