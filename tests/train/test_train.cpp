// End to end on the real data: one short epoch on 2,000 Fashion-MNIST images
// lowers the loss; a stopped and resumed run equals an uninterrupted one bit for
// bit; a checkpoint of another model is refused.
#include <torch/torch.h>

#include <algorithm>
#include <cfloat>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "data/fashion_mnist.h"
#include "run_files.h"
#include "support.h"
#include "optim/adamw.h"
#include "optim/schedule.h"
#include "train/checkpoint.h"
#include "train/memory.h"
#include "train/trainer.h"
#include "util/denormals.h"
#include "util/error.h"
#include "util/safetensors.h"

namespace {

using kiln::test::read_json_lines;
using kiln::test::read_metrics;

kiln::train::RunSpec small_spec(const std::string& run_dir) {
  REQUIRE(std::filesystem::exists(kiln::data::kDefaultFashionMnistRoot));  // scripts/setup installs it
  kiln::train::RunSpec spec;
  spec.run_dir = run_dir;
  spec.config_toml = "# test\n";
  spec.data.train_limit(2000).test_limit(500);
  spec.model.mlp = kiln::nn::MlpOptions(784, {64}, 10);
  spec.train.epochs(1).batch_size(50).log_every(1).seed(3);
  return spec;
}

// The weights of a checkpoint, in the file's order.
std::vector<torch::Tensor> weights_of(const std::string& checkpoint) {
  std::vector<torch::Tensor> out;
  for (const auto& [name, t] : kiln::test::checkpoint_weights(checkpoint)) out.push_back(t);
  return out;
}

// A Checkpointer for a model outside a run, with the state parts the trainer registers.
kiln::train::Checkpointer trainer_checkpointer(const std::string& run_dir, torch::nn::Module& model,
                                               torch::optim::Optimizer& opt) {
  kiln::train::Checkpointer ckpt(run_dir, model, opt);
  ckpt.add_part({"schedule", [](auto&) {}, [](auto&) {}});
  ckpt.add_part({"scaler", [](auto&) {}, [](auto&) {}});
  return ckpt;
}

}  // namespace

TEST_CASE("one short epoch on 2,000 images lowers the loss", "[train][e2e]") {
  kiln::test::TempDir dir;
  kiln::train::TrainObserver quiet;
  const auto r = kiln::train::train(small_spec(dir / "run"), quiet);
  REQUIRE(r.finished);
  REQUIRE(r.steps == 40);
  const auto lines = read_metrics(dir / "run");
  std::vector<double> train_loss;
  nlohmann::json test;
  for (const auto& l : lines) {
    if (l["split"] == "train") train_loss.push_back(l["loss"].get<double>());
    if (l["split"] == "test") test = l;
  }
  REQUIRE(train_loss.size() == 40);
  const auto mean = [](auto b, auto e) { return std::accumulate(b, e, 0.0) / std::distance(b, e); };
  const double first = mean(train_loss.begin(), train_loss.begin() + 5);
  const double last = mean(train_loss.end() - 5, train_loss.end());
  INFO("mean loss of the first 5 steps " << first << ", of the last 5 " << last);
  REQUIRE(last < 0.6 * first);
  REQUIRE(test["step"] == 40);
  REQUIRE(test["epoch"] == 1);
  REQUIRE(test["accuracy"].get<double>() > 0.5);
  REQUIRE(test["accuracy"].get<double>() <= 1.0);
  REQUIRE(r.test_accuracy == test["accuracy"].get<double>());
  REQUIRE(std::filesystem::exists(r.last_checkpoint + "/model.safetensors"));
}

TEST_CASE("stopping and resuming gives the same parameters as one run", "[train][resume]") {
  kiln::test::TempDir dir;
  kiln::train::TrainObserver quiet;
  auto straight = small_spec(dir / "straight");
  straight.train.epochs(2).max_steps(70);  // 70 steps: crosses the epoch boundary at 40
  // Everything that carries state across steps: dropout (the RNG), a warmup and
  // cosine schedule, clipping, gradient accumulation, AdamW's moments.
  straight.model.mlp.dropout(0.2);
  straight.schedule.kind("cosine").warmup_steps(10).min_lr_ratio(0.1);
  straight.train.clip_norm(1.0).accumulate(2);
  const auto a = kiln::train::train(straight, quiet);

  auto first = straight;
  first.run_dir = dir / "resumed";
  first.train.max_steps(25);  // stop mid-epoch
  kiln::train::train(first, quiet);
  auto second = first;
  second.train.max_steps(70);
  second.resume_checkpoint = kiln::train::latest_checkpoint(first.run_dir).value();
  const auto b = kiln::train::train(second, quiet);
  REQUIRE(b.resumed_from == 25);
  REQUIRE(b.steps == 70);

  const auto wa = weights_of(a.last_checkpoint), wb = weights_of(b.last_checkpoint);
  REQUIRE(wa.size() == wb.size());
  for (size_t i = 0; i < wa.size(); ++i) REQUIRE(torch::equal(wa[i], wb[i]));
  // The losses after the resume point match the uninterrupted run's, step by step.
  const auto la = read_metrics(dir / "straight"), lb = read_metrics(dir / "resumed");
  std::map<int64_t, double> loss_a;
  for (const auto& l : la)
    if (l["split"] == "train") loss_a[l["step"].get<int64_t>()] = l["loss"].get<double>();
  int compared = 0;
  for (const auto& l : lb)
    if (l["split"] == "train" && l["step"].get<int64_t>() > 25) {
      REQUIRE(l["loss"].get<double>() == loss_a.at(l["step"].get<int64_t>()));
      ++compared;
    }
  REQUIRE(compared == 45);
}

TEST_CASE("a checkpoint of another model is refused with the mismatch named", "[train][checkpoint]") {
  kiln::test::TempDir dir;
  kiln::train::TrainObserver quiet;
  auto spec = small_spec(dir / "run");
  spec.train.max_steps(3);
  const auto r = kiln::train::train(spec, quiet);

  kiln::nn::Mlp other(kiln::nn::MlpOptions(784, {32}, 10));
  kiln::optim::AdamW opt(other->parameters());
  REQUIRE_THROWS_MATCHES(trainer_checkpointer(dir / "run", *other, opt).load(r.last_checkpoint),
                         kiln::InputError,
                         Catch::Message(r.last_checkpoint +
                                        "/model.safetensors: 'layers.0.weight' is Float[64, 784] but the "
                                        "model's is Float[32, 784]"));
  // A damaged file is an InputError too, and the checkpoint stays as it was.
  const auto before = weights_of(r.last_checkpoint);
  std::filesystem::resize_file(r.last_checkpoint + "/trainer.pt", 10);
  kiln::nn::Mlp same(kiln::nn::MlpOptions(784, {64}, 10));
  kiln::optim::AdamW opt2(same->parameters());
  REQUIRE_THROWS_AS(trainer_checkpointer(dir / "run", *same, opt2).load(r.last_checkpoint),
                    kiln::InputError);
  const auto after = weights_of(r.last_checkpoint);
  for (size_t i = 0; i < before.size(); ++i) REQUIRE(torch::equal(before[i], after[i]));
}

TEST_CASE("gradient accumulation over micro-batches gives the parameters of whole batches",
          "[train][accumulate]") {
  kiln::test::TempDir dir;
  kiln::train::TrainObserver quiet;
  auto whole = small_spec(dir / "whole");
  whole.train.max_steps(10);
  auto parts = whole;
  parts.run_dir = dir / "parts";
  parts.train.accumulate(5);  // 5 micro-batches of 10
  const auto a = kiln::train::train(whole, quiet), b = kiln::train::train(parts, quiet);
  const auto wa = weights_of(a.last_checkpoint), wb = weights_of(b.last_checkpoint);
  REQUIRE(wa.size() == wb.size());
  for (size_t i = 0; i < wa.size(); ++i) {
    const auto c = kiln::test::all_close(wb[i], wa[i], 1e-4, 1e-6);
    INFO(c.report);
    REQUIRE(c.ok);
  }
}

TEST_CASE("a non-finite loss stops the run, names the first bad gradient, keeps the checkpoint",
          "[train][nan]") {
  kiln::test::TempDir dir;
  kiln::train::TrainObserver quiet;
  auto spec = small_spec(dir / "run");
  spec.optim.lr = 1e30;  // one AdamW step moves every weight by ~1e30: the next logits overflow
  spec.checkpoint.every(1);
  REQUIRE_THROWS_WITH(kiln::train::train(spec, quiet),
                      Catch::Contains("at step 2; the model's first non-finite tensor is the gradient of layers."));
  const auto saved = kiln::train::list_checkpoints(dir / "run");
  REQUIRE(saved.size() == 1);
  REQUIRE(saved[0].step == 1);
  // The last good checkpoint loads and holds finite weights.
  kiln::nn::Mlp model(kiln::nn::MlpOptions(784, {64}, 10));
  kiln::optim::AdamW opt(model->parameters());
  REQUIRE(trainer_checkpointer(dir / "run", *model, opt).load(saved[0].dir).step == 1);
  for (const auto& p : model->parameters()) REQUIRE(p.isfinite().all().item<bool>());
}

TEST_CASE("a bf16 run trains and every run writes memory reports", "[train][amp][memory]") {
  kiln::test::TempDir dir;
  kiln::train::TrainObserver quiet;
  auto spec = small_spec(dir / "run");
  spec.train.precision("bf16");
  spec.memory.report_every(10);
  const auto r = kiln::train::train(spec, quiet);
  REQUIRE(r.finished);
  REQUIRE(r.test_accuracy > 0.5);
  const auto lines = read_json_lines(dir / "run/memory.jsonl");
  REQUIRE(lines.size() == 4);  // steps 10, 20, 30 and 40 (the end)
  const int64_t params = (784 * 64 + 64 + 64 * 10 + 10) * 4;
  REQUIRE(lines.back()["parameter_bytes"] == params);
  REQUIRE(lines.back()["gradient_bytes"] == params);
  REQUIRE(lines.back()["optimizer_state_bytes"] == 2 * params);  // AdamW's two moments
  REQUIRE(lines.back()["activation_peak_bytes"].get<int64_t>() > 0);
}

namespace {
// Asks the loop to stop (as the app does on SIGTERM) once `at` steps are done.
struct StopAt : kiln::train::TrainObserver {
  int64_t at, seen = 0;
  explicit StopAt(int64_t at) : at(at) {}
  void on_step(const kiln::train::StepReport& r) override { seen = r.step; }
  int stop_requested() override { return seen >= at ? SIGTERM : 0; }
};
}  // namespace

TEST_CASE("a run measures its activations only on steps a memory report can show", "[train][memory]") {
  // Each measurement reads glibc's heap statistics twice (a walk over its bins that
  // also merges them): the first step of the process's run, every
  // memory.report_every-th and the planned last; a report after an early stop shows
  // the last measured step's.
  struct Case {
    int64_t every, stop_at, probes, reports;
  };
  for (const auto& c : {Case{0, 0, 2, 1}, Case{10, 0, 5, 4}, Case{1, 0, 40, 40}, Case{0, 5, 1, 1}}) {
    INFO("report_every " << c.every << ", stop after " << c.stop_at);
    kiln::test::TempDir dir;
    auto spec = small_spec(dir / "run");  // 40 steps
    spec.memory.report_every(c.every);
    const int64_t before = kiln::train::ActivationProbe::made();
    std::unique_ptr<kiln::train::TrainObserver> observer;
    if (c.stop_at > 0) observer = std::make_unique<StopAt>(c.stop_at);
    else observer = std::make_unique<kiln::train::TrainObserver>();
    const auto r = kiln::train::train(spec, *observer);
    REQUIRE(r.steps == (c.stop_at > 0 ? c.stop_at : 40));
    CHECK(kiln::train::ActivationProbe::made() - before == c.probes);
    const auto lines = read_json_lines(dir / "run/memory.jsonl");
    REQUIRE(static_cast<int64_t>(lines.size()) == c.reports);
    for (const auto& line : lines) CHECK(line["activation_peak_bytes"].get<int64_t>() > 0);
  }
}


TEST_CASE("the observer's stop request ends the run after the step with a checkpoint",
          "[train][resume]") {
  kiln::test::TempDir dir;
  StopAt stop(3);
  const auto r = kiln::train::train(small_spec(dir / "run"), stop);
  REQUIRE(r.interrupted_by == SIGTERM);
  REQUIRE(r.steps == 3);
  REQUIRE_FALSE(r.finished);
  REQUIRE(kiln::train::latest_checkpoint(dir / "run").value() == r.last_checkpoint);
  REQUIRE(kiln::train::list_checkpoints(dir / "run").back().step == 3);
}

TEST_CASE("resuming from an older checkpoint sets the later ones and their metrics aside",
          "[train][resume]") {
  kiln::test::TempDir dir;
  kiln::train::TrainObserver quiet;
  auto spec = small_spec(dir / "run");
  spec.train.epochs(2).log_every(1);
  spec.checkpoint.every(10).keep_last(0);
  const auto straight = kiln::train::train(spec, quiet);  // 80 steps, evaluations at 40 and 80
  REQUIRE(straight.steps == 80);
  const auto original = read_metrics(dir / "run");

  auto again = spec;
  again.resume_checkpoint = dir / "run/checkpoints/step_000000030";
  const auto resumed = kiln::train::train(again, quiet);
  REQUIRE(resumed.resumed_from == 30);
  REQUIRE(resumed.superseded_checkpoints == 5);  // steps 40, 50, 60, 70, 80
  for (const char* step : {"40", "50", "60", "70", "80"})
    REQUIRE(std::filesystem::is_directory(dir / ("run/superseded/step_0000000" + std::string(step))));
  // One trajectory: steps increase without a repeat, and the lines match the straight
  // run's — train_loss of the test line at step 40 included, though the resume fell
  // between two evaluations.
  const auto lines = read_metrics(dir / "run");
  REQUIRE(lines.size() == original.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    INFO(lines[i].dump() << "\n  straight: " << original[i].dump());
    REQUIRE(lines[i]["split"] == original[i]["split"]);
    REQUIRE(lines[i]["step"] == original[i]["step"]);
    for (const char* key : {"loss", "accuracy", "train_loss", "grad_norm"})
      if (original[i].contains(key)) REQUIRE(lines[i][key] == original[i][key]);
    if (i > 0) REQUIRE(lines[i]["step"] >= lines[i - 1]["step"]);
  }
  // The cut lines are kept beside: every line after step 30, in order.
  const auto aside = read_json_lines(dir / "run/metrics.superseded.jsonl");
  const auto later = std::count_if(original.begin(), original.end(),
                                   [](const auto& l) { return l["step"].template get<int64_t>() > 30; });
  REQUIRE(static_cast<int64_t>(aside.size()) == later);
  REQUIRE(aside.front()["step"] == 31);
  // --resume RUN now means the resumed trajectory's newest checkpoint, of step 80.
  REQUIRE(kiln::train::latest_checkpoint(dir / "run").value() == resumed.last_checkpoint);
  // And it is the straight run's trajectory, bit for bit (the straight run's step 80
  // is the copy set aside).
  const auto wr = weights_of(resumed.last_checkpoint);
  const auto ws = weights_of(dir / "run/superseded/step_000000080");
  REQUIRE(wr.size() == ws.size());
  for (size_t i = 0; i < wr.size(); ++i) REQUIRE(torch::equal(wr[i], ws[i]));

  // Resumed from step 30 once more: the second set-aside copies take new names.
  const auto twice = kiln::train::train(again, quiet);
  REQUIRE(twice.superseded_checkpoints == 5);
  REQUIRE(std::filesystem::is_directory(dir / "run/superseded/step_000000080-2"));
}

// Counts the evaluations an observer is told of.
struct CountEvals : kiln::train::TrainObserver {
  int evals = 0;
  void on_eval(const kiln::train::EvalReport&) override { ++evals; }
};

TEST_CASE("an epoch's-end checkpoint holds the epoch's evaluation; resuming from it adds no second one",
          "[train][resume][checkpoint]") {
  kiln::test::TempDir dir;
  kiln::train::TrainObserver quiet;
  auto spec = small_spec(dir / "run");
  spec.train.epochs(1).log_every(10);
  spec.checkpoint.every(40).keep_last(0);  // 40 steps an epoch: the periodic save falls on its end
  const auto first = kiln::train::train(spec, quiet);
  REQUIRE(first.steps == 40);
  // Written after the evaluation, the checkpoint carries its metrics, which
  // checkpoint.best ranks by (it used to be written just before: no metrics).
  const auto saved = kiln::train::list_checkpoints(dir / "run");
  REQUIRE(saved.size() == 1);
  REQUIRE(saved[0].metrics.count("test_accuracy") == 1);
  REQUIRE(saved[0].metrics.at("test_accuracy") == first.test_accuracy);
  const auto tested = [&] {
    std::vector<int64_t> steps;
    for (const auto& l : read_metrics(dir / "run"))
      if (l["split"] == "test") steps.push_back(l["step"].get<int64_t>());
    return steps;
  };
  REQUIRE(tested() == std::vector<int64_t>{40});

  // On to a second epoch: the evaluation of step 40 is not written or reported again.
  auto more = spec;
  more.train.epochs(2);
  more.resume_checkpoint = saved[0].dir;
  CountEvals counted;
  const auto second = kiln::train::train(more, counted);
  REQUIRE(second.steps == 80);
  REQUIRE(counted.evals == 1);
  REQUIRE(tested() == std::vector<int64_t>{40, 80});

  // A finished run resumed: nothing trained, nothing written; the result still has
  // the last evaluation's figures, and its checkpoint is the one resumed from, not
  // written again.
  more.resume_checkpoint = second.last_checkpoint;
  const auto before = std::filesystem::last_write_time(second.last_checkpoint + "/manifest.json");
  const auto lines = read_metrics(dir / "run").size();
  CountEvals idle;
  const auto third = kiln::train::train(more, idle);
  REQUIRE(third.steps == 80);
  REQUIRE(idle.evals == 0);
  REQUIRE(third.evaluated);
  REQUIRE(third.test_accuracy == second.test_accuracy);
  REQUIRE(third.per_class_accuracy.size() == 10);
  REQUIRE(third.last_checkpoint == second.last_checkpoint);
  REQUIRE(std::filesystem::last_write_time(second.last_checkpoint + "/manifest.json") == before);
  REQUIRE(read_metrics(dir / "run").size() == lines);
}

TEST_CASE("a resume trains with the config's learning rate and optimizer settings, not the checkpoint's",
          "[train][resume]") {
  kiln::test::TempDir dir;
  kiln::train::TrainObserver quiet;
  auto spec = small_spec(dir / "run");
  spec.train.epochs(2).max_steps(20).log_every(1);
  spec.schedule.kind("cosine").warmup_steps(5).min_lr_ratio(0.1);
  spec.optim.lr = 1e-3;
  kiln::train::train(spec, quiet);
  auto again = spec;
  again.resume_checkpoint = kiln::train::latest_checkpoint(dir / "run").value();
  again.train.max_steps(30);
  again.optim.lr = 4e-3;  // --set optim.lr on --resume: it used to be ignored (the checkpoint's 1e-3 came back)
  kiln::train::train(again, quiet);
  // The schedule keeps its place (step 20 of 80), its base is the new rate.
  kiln::optim::ScheduleOptions shape;
  shape.kind("cosine").warmup_steps(5).total_steps(80).min_lr_ratio(0.1);
  torch::optim::SGD probe({torch::zeros({1}, torch::requires_grad())}, torch::optim::SGDOptions(1.0));
  const kiln::optim::LrSchedule schedule(probe, shape);
  int checked = 0;
  for (const auto& l : read_metrics(dir / "run")) {
    if (l["split"] != "train") continue;
    const int64_t step = l["step"].get<int64_t>();
    const double base = step <= 20 ? 1e-3 : 4e-3;  // step 20's line is the first run's; a line shows the next step's lr
    INFO("step " << step);
    REQUIRE(l["lr"].get<double>() == Approx(base * schedule.factor(step)).epsilon(1e-12));
    ++checked;
  }
  REQUIRE(checked == 30);
}

TEST_CASE("a resume that trains nothing takes no step; fewer epochs than trained are refused",
          "[train][resume]") {
  kiln::test::TempDir dir;
  kiln::train::TrainObserver quiet;
  auto spec = small_spec(dir / "run");
  spec.train.epochs(2).max_steps(50);  // 40 steps an epoch: stops 10 steps into the second
  REQUIRE(kiln::train::train(spec, quiet).steps == 50);
  auto again = spec;
  again.resume_checkpoint = kiln::train::latest_checkpoint(dir / "run").value();
  // The same train.max_steps: it used to take one more step, and write a step 51.
  const auto idle = kiln::train::train(again, quiet);
  REQUIRE(idle.steps == 50);
  REQUIRE(kiln::train::latest_checkpoint(dir / "run").value() == again.resume_checkpoint);
  // train.epochs below what the run has trained: refused before anything is written.
  const auto lines = read_metrics(dir / "run").size();
  auto fewer = again;
  fewer.train.epochs(1).max_steps(0);
  CHECK_THAT(kiln::test::input_error_of([&] { kiln::train::train(fewer, quiet); }),
             Catch::Contains("train.epochs: expected at least 2 (the run has trained into epoch 2: ") &&
                 Catch::Contains("is step 50), found 1; to stop a run early, train.max_steps"));
  REQUIRE(read_metrics(dir / "run").size() == lines);
  auto more = again;
  more.train.max_steps(0);
  REQUIRE(kiln::train::train(more, quiet).steps == 80);
}

TEST_CASE("a metrics line cut short by a crash is set aside on resume, not left mid-file",
          "[train][resume]") {
  kiln::test::TempDir dir;
  kiln::train::TrainObserver quiet;
  auto spec = small_spec(dir / "run");
  spec.train.log_every(1).max_steps(20);
  spec.checkpoint.every(10).keep_last(0);
  kiln::train::train(spec, quiet);
  // A crash in the middle of writing step 21's line: half a line, no newline.
  std::ofstream(dir / "run/metrics.jsonl", std::ios::app) << R"({"split":"train","step":21,"lo)";
  auto again = spec;
  again.resume_checkpoint = dir / "run/checkpoints/step_000000020";
  again.train.max_steps(30);
  kiln::train::train(again, quiet);
  const auto lines = read_metrics(dir / "run");  // every line parses
  REQUIRE(lines.back()["step"] == 30);
  std::ifstream aside(dir / "run/metrics.superseded.jsonl");
  std::string line;
  REQUIRE(std::getline(aside, line));
  REQUIRE(line == R"({"split":"train","step":21,"lo)");
}

TEST_CASE("fp16 train lines carry the loss scale; other precisions have none", "[train][amp]") {
  kiln::test::TempDir dir;
  for (const std::string precision : {"fp16", "bf16"}) {
    INFO(precision);
    const std::string run = dir / precision;
    REQUIRE(kiln::test::train("configs/tiny.toml", run,
                              {"data.train_limit=320", "train.threads=1", "train.precision=" + precision}) == 0);
    int train_lines = 0;
    for (const auto& l : read_metrics(run)) {
      if (l["split"] != "train") continue;
      ++train_lines;
      if (precision == "fp16") REQUIRE(l["loss_scale"] == 65536.0);  // no overflow in 5 steps: unchanged
      else REQUIRE_FALSE(l.contains("loss_scale"));
    }
    REQUIRE(train_lines == 1);  // log_every 5, 5 steps
  }
}

namespace {
// Whether each step ran with denormals flushed, on the loop's thread and on the
// threads of ATen's pool: a product over 2^18 floats that they share (8 grains of
// 32,768) makes no denormal where each of them flushes.
struct FlushSeen : kiln::train::TrainObserver {
  std::vector<bool> main, pool;
  void on_step(const kiln::train::StepReport&) override {
    main.push_back(kiln::util::flushes_denormals());
    const auto made = at::full({1 << 18}, FLT_MIN, at::kFloat).mul(0.25f);  // 2^-128, or 0 flushed
    pool.push_back(made.ne(0).sum().item<int64_t>() == 0);
  }
};
}  // namespace

// train.flush_denormals: a denormal costs a CPU instruction about a hundred cycles and
// AdamW's moments of dead units decay into them (util/denormals.h). The run flushes
// them on all its threads, as configured, and leaves the process's mode as it was.
TEST_CASE("a run flushes denormals on its threads unless told not to, and restores the mode",
          "[train][denormals]") {
  const bool flush = GENERATE(true, false);
  INFO("flush_denormals " << flush);
  kiln::test::TempDir dir;
  auto spec = small_spec(dir / "run");
  spec.train.max_steps(3).threads(2).flush_denormals(flush);
  FlushSeen seen;
  REQUIRE_FALSE(kiln::util::flushes_denormals());
  REQUIRE(kiln::train::train(spec, seen).steps == 3);
  REQUIRE(seen.main == std::vector<bool>(3, flush));
  REQUIRE(seen.pool == std::vector<bool>(3, flush));
  REQUIRE_FALSE(kiln::util::flushes_denormals());
}
