// Host reads in the training loop: a step leaves its loss and gradient norm on the
// device, and the loop brings them to the host on log steps only. The count is of
// aten::_local_scalar_dense, what item() runs: on CUDA each one is a host sync, so
// this CPU run is the CUDA-free proxy for the syncs of a CUDA step.
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <atomic>
#include <filesystem>
#include <string_view>

#include "data/fashion_mnist.h"
#include "run_files.h"
#include "support.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace {

std::atomic<int64_t> scalar_reads{0}, casts{0}, fills{0};
thread_local int op_depth = 0;  // ops of the FUNCTION scope this thread is inside

// Counts, on every thread while it lives, aten::_local_scalar_dense calls (item():
// a host sync on CUDA), and the casts (aten::to, aten::_to_copy) and fills
// (aten::fill_, aten::zero_, aten::ones_like) called outside any other op, i.e. by
// the loop itself rather than inside the model's ops: on CUDA each is a launch.
class CountOps {
 public:
  CountOps() {
    scalar_reads = 0, casts = 0, fills = 0;
    handle_ = at::addGlobalCallback(
        at::RecordFunctionCallback(
            [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
              const std::string_view name(fn.name());
              if (name == "aten::_local_scalar_dense") ++scalar_reads;
              if (op_depth++ == 0) {
                if (name == "aten::to" || name == "aten::_to_copy") ++casts;
                if (name == "aten::fill_" || name == "aten::zero_" || name == "aten::ones_like") ++fills;
              }
              return nullptr;
            },
            [](const at::RecordFunction&, at::ObserverContext*) { --op_depth; })
            .scopes({at::RecordScope::FUNCTION}));
  }
  ~CountOps() { at::removeCallback(handle_); }
  CountOps(const CountOps&) = delete;
  CountOps& operator=(const CountOps&) = delete;

 private:
  at::CallbackHandle handle_;
};

// The reads made during each step: the count at each on_step against the one before.
// With `read` it asks for each step's loss and gradient norm, as a console would.
struct ReadsPerStep : kiln::train::TrainObserver {
  bool read = false;
  int64_t last = 0, last_casts = 0, last_fills = 0;
  std::vector<int64_t> reads, step_casts, step_fills;
  std::vector<std::pair<double, double>> values;
  void on_step(const kiln::train::StepReport& r) override {
    reads.push_back(scalar_reads - last);
    step_casts.push_back(casts - last_casts);
    step_fills.push_back(fills - last_fills);
    if (read) values.push_back(r.loss_and_grad_norm());
    last = scalar_reads, last_casts = casts, last_fills = fills;
  }
};

kiln::train::RunSpec spec_in(const std::string& run_dir) {
  REQUIRE(std::filesystem::exists(kiln::data::kDefaultFashionMnistRoot));  // scripts/setup installs it
  kiln::train::RunSpec spec;
  spec.run_dir = run_dir;
  spec.config_toml = "# test\n";
  spec.data.train_limit(2000).test_limit(200);
  spec.model.mlp = kiln::nn::MlpOptions(784, {64}, 10);
  spec.train.epochs(1).batch_size(50).log_every(10).seed(5);  // 40 steps
  spec.checkpoint.every(0);
  return spec;
}

}  // namespace

TEST_CASE("a training step reads nothing to the host; a log step, one value at most", "[train][syncs]") {
  kiln::test::TempDir dir;
  const std::string variant = GENERATE("fp32", "bf16", "accumulate 2, clip 1.0");
  INFO(variant);
  auto spec = spec_in(dir / "run");
  spec.train.max_steps(30);  // no evaluation: the epoch has 40
  if (variant == "bf16") spec.train.precision("bf16");
  if (variant != "fp32" && variant != "bf16") spec.train.accumulate(2).clip_norm(1.0);
  ReadsPerStep observer;
  {
    CountOps count;
    REQUIRE(kiln::train::train(spec, observer).steps == 30);
  }
  REQUIRE(observer.reads.size() == 30);
  // Step 1's count holds the set-up's reads (the data's statistics); every later step
  // is the loop alone. Before the loss and norm stayed on the device a step made 3
  // (each micro-batch's loss, the gradient norm, cross-entropy backward's scale). A
  // log step reads the gradient norm it computes for the line when no clipping
  // computed it; the loss comes with the unread steps' in one copy (no item()).
  const bool clipped = spec.train.clip_norm() > 0;
  for (size_t i = 1; i < observer.reads.size(); ++i) {
    INFO("step " << i + 1);
    REQUIRE(observer.reads[i] == ((i + 1) % 10 == 0 && !clipped ? 1 : 0));
  }
  // The log steps' lines hold the values all the same.
  int64_t lines = 0;
  for (const auto& l : kiln::test::read_metrics(dir / "run"))
    if (l["split"] == "train") {
      ++lines;
      REQUIRE(std::isfinite(l["loss"].get<double>()));
      REQUIRE(l["grad_norm"].get<double>() > 0);
    }
  REQUIRE(lines == 3);
}

// Around the model's own ops a plain float32 step casts nothing and fills nothing:
// the loss goes into the float64 row of unread values as it is (the copy widens it),
// the gradient-norm column is zeroed once per batch of unread rows rather than a row
// a step, and backward starts from a 1 made once (autograd's own would be a new
// ones_like each step). Before, each step made one cast and two fills.
TEST_CASE("a plain training step makes no cast or fill of its own", "[train][syncs]") {
  kiln::test::TempDir dir;
  auto spec = spec_in(dir / "run");
  spec.train.max_steps(30);
  ReadsPerStep observer;
  {
    CountOps count;
    REQUIRE(kiln::train::train(spec, observer).steps == 30);
  }
  REQUIRE(observer.step_casts.size() == 30);
  for (size_t i = 1; i < observer.step_casts.size(); ++i) {
    INFO("step " << i + 1);
    // A log step brings the unread rows to the host: that copy is its one cast.
    REQUIRE(observer.step_casts[i] == ((i + 1) % 10 == 0 ? 1 : 0));
    // The step after a log step's read starts a new batch of unread rows: one zeroing.
    REQUIRE(observer.step_fills[i] == (i % 10 == 0 ? 1 : 0));
  }
}

TEST_CASE("values read late equal values read every step", "[train][syncs]") {
  kiln::test::TempDir dir;
  kiln::train::TrainObserver quiet;
  auto every = spec_in(dir / "every");
  every.train.log_every(1);
  auto late = spec_in(dir / "late");
  late.train.log_every(16);  // 40 steps: the last 8 are read by the end's evaluation
  ReadsPerStep asking;
  asking.read = true;
  auto asked = spec_in(dir / "asked");
  asked.train.log_every(16);
  kiln::train::train(every, quiet);
  kiln::train::train(late, quiet);
  kiln::train::train(asked, asking);

  const auto split = [](const std::string& run, std::vector<nlohmann::json>& train, nlohmann::json& test) {
    for (const auto& l : kiln::test::read_metrics(run)) {
      if (l["split"] == "train") train.push_back(l);
      if (l["split"] == "test") test = l;
    }
  };
  std::vector<nlohmann::json> train_every, train_late;
  nlohmann::json test_every, test_late;
  split(dir / "every", train_every, test_every);
  split(dir / "late", train_late, test_late);
  REQUIRE(train_every.size() == 40);
  REQUIRE(train_late.size() == 2);
  for (const auto& l : train_late) {
    const auto& e = train_every.at(l["step"].get<size_t>() - 1);
    REQUIRE(l["loss"] == e["loss"]);
    REQUIRE(l["grad_norm"] == e["grad_norm"]);
  }
  // The mean training loss since the last evaluation: every step's loss, in order.
  REQUIRE(test_late["train_loss"] == test_every["train_loss"]);
  // An observer that asks each step sees each step's own values.
  REQUIRE(asking.values.size() == 40);
  for (size_t i = 0; i < 40; ++i) {
    INFO("step " << i + 1);
    REQUIRE(asking.values[i].first == train_every[i]["loss"].get<double>());
    REQUIRE(asking.values[i].second == train_every[i]["grad_norm"].get<double>());
  }
}

TEST_CASE("a non-finite loss between log steps stops the run at the next read, naming its step",
          "[train][syncs][nan]") {
  kiln::test::TempDir dir;
  kiln::train::TrainObserver quiet;
  auto spec = spec_in(dir / "run");
  spec.optim.lr = 1e30;  // one AdamW step moves every weight by ~1e30: the next logits overflow
  spec.train.log_every(8);
  REQUIRE_THROWS_WITH(kiln::train::train(spec, quiet),
                      Catch::Contains("became nan at step 2 (read at step 8") &&
                          Catch::Contains("; at step 8 the model's first non-finite tensor is the gradient of layers."));
  REQUIRE(kiln::train::list_checkpoints(dir / "run").empty());  // nothing saved from bad weights
  REQUIRE(kiln::test::read_metrics(dir / "run").empty());
}
