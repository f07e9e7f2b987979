// kiln_bench_loader: whether the loader keeps up with training. (a) The loader
// alone (next() with no work: its delivery rate, through the worker at depth 2 and
// without one at depth 0) against the training step's consumption (a fixed batch,
// the default model and AdamW, batch 128): ratio = step time / loader time per
// batch (goal ≥ 10). (b) Training loops of --steps steps (start, next() and a step,
// as Run::run) with prefetching on (depth 2) and off (depth 0), one model for both:
// ratio = samples/s on / off. Each on Fashion-MNIST (60000×784 float32, as kiln
// trains on it) and on a CSV-shaped set (100k rows × 20 standardised features, 2
// classes), the two sides interleaved round by round; samples/s = batch × batches/s.
// (c) On Fashion-MNIST, augmentation (a flip and a 2-pixel crop, as
// configs/fashion_convnet.toml) by kiln's one pass against the per-image ATen crops
// and flips it replaced (the twin below): ratio = twin time / kiln's.
// The machine's load average is printed: other work moves every figure.
#include "bench_support.h"
#include "data/augment.h"
#include "data/fashion_mnist.h"
#include "data/loader.h"
#include "data/prefetch.h"
#include "nn/factory.h"
#include "ops/ops.h"
#include "optim/factory.h"

#include <torch/torch.h>

#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

namespace {

namespace kb = kiln::bench;
using kiln::data::Batch;
using kiln::data::BatchLoader;
using kiln::data::PrefetchLoader;
using kiln::data::PrefetchOptions;

struct DataSet {
  std::string name;
  at::Tensor x, y;  // x: (N, features) float32, y: (N) int64
  int64_t classes;
};

DataSet fashion_mnist(const std::string& root) {
  try {
    const auto train = kiln::data::load_fashion_mnist(root, kiln::data::Split::kTrain);
    const auto norm = kiln::data::pixel_statistics(train.images);
    return {"fashion-mnist", kiln::data::normalize_images(train.images, norm), train.labels, 10};
  } catch (const std::exception& e) {
    std::printf("(no Fashion-MNIST in %s: %s; random data of its shape instead)\n", root.c_str(),
                e.what());
    return {"fashion-mnist-shaped", at::randn({60000, 784}), at::randint(0, 10, {60000}), 10};
  }
}

DataSet csv_shaped() {
  return {"csv-shaped", at::randn({100000, 20}), at::randint(0, 2, {100000}), 2};
}

// The trainer's step in fp32 without accumulation: forward, kiln's cross-entropy,
// backward, the gradient norm it logs, AdamW (kiln's own, as make_optimizer builds it).
class Trainer {
 public:
  Trainer(int64_t features, int64_t classes) {
    kiln::nn::ModelSpec spec;  // the default: mlp, hidden 512, 256
    kiln::nn::fit_to_data(spec, {features}, features, classes);
    torch::manual_seed(0);
    model_ = kiln::nn::make_model(spec);
    optimizer_ = kiln::optim::make_optimizer(kiln::optim::OptimizerSpec(),
                                             model_.ptr()->named_parameters());
  }
  void step(const Batch& b) {
    optimizer_->zero_grad();
    const auto loss = kiln::ops::cross_entropy(model_.forward(b.x), b.y);
    loss.backward();
    std::vector<at::Tensor> grads;
    for (const auto& p : model_.ptr()->parameters()) grads.push_back(p.grad());
    (void)kiln::ops::grad_norm(grads).item<double>();
    (void)loss.item<double>();
    optimizer_->step();
  }

 private:
  torch::nn::AnyModule model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

// One batch per call from a prefetcher, a new epoch when one is used up.
std::function<void()> next_batch(const BatchLoader& loader, int64_t depth) {
  auto batches = std::make_shared<PrefetchLoader>(loader, PrefetchOptions().depth(depth));
  auto taken = std::make_shared<int64_t>(0), epoch = std::make_shared<int64_t>(0);
  batches->start(0, 0);
  return [=] {
    if (*taken == batches->size()) {
      batches->start(++*epoch, 0);
      *taken = 0;
    }
    (void)batches->next();
    ++*taken;
  };
}

// `steps` training steps on the batches of a new epoch each call (the loop of
// Run::run: start, then next() and a step), with prefetching at `depth`.
std::function<void()> training_loop(std::shared_ptr<Trainer> trainer, const BatchLoader& loader,
                                    int64_t depth, int64_t steps) {
  auto batches = std::make_shared<PrefetchLoader>(loader, PrefetchOptions().depth(depth));
  auto epoch = std::make_shared<int64_t>(0);
  return [=] {
    batches->start((*epoch)++, 0);
    for (int64_t i = 0; i < steps; ++i) trainer->step(batches->next());
    batches->stop();
  };
}

// augment()'s map before it moved each batch in one pass (2026-12-05): padding, then
// per image a narrowed crop, a flip and a copy, four dispatched operations an image.
at::Tensor crop_flip_per_image(const at::Tensor& images, const at::Tensor& flips,
                               const at::Tensor& offsets, int64_t p, double fill) {
  const auto padded = at::constant_pad_nd(images, {p, p, p, p}, fill);
  auto out = at::empty_like(images, at::MemoryFormat::Contiguous);
  const auto* f = flips.const_data_ptr<int64_t>();
  const auto* off = offsets.const_data_ptr<int64_t>();
  for (int64_t i = 0; i < images.size(0); ++i) {
    auto crop = padded[i].narrow(1, off[2 * i], images.size(2)).narrow(2, off[2 * i + 1], images.size(3));
    out[i].copy_(f[i] ? crop.flip({2}) : crop);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("kiln_bench_loader",
                           "the loader's delivery against the training step's consumption");
  kb::add_common_options(options, "15", "100");
  options.add_options()
      ("batch-size", "examples per batch", cxxopts::value<int64_t>()->default_value("128"))
      ("steps", "training steps per call in (b)", cxxopts::value<int64_t>()->default_value("25"))
      ("parts", "which measurements: loader (a), loop (b), augment (c)",
       cxxopts::value<std::string>()->default_value("loader,loop,augment"))
      ("fashion-root", "Fashion-MNIST's IDX files (random data of its shape without them)",
       cxxopts::value<std::string>()->default_value(kiln::data::kDefaultFashionMnistRoot));
  const auto args = options.parse(argc, argv);
  std::optional<kb::Common> common;
  try {
    common = kb::parse_common(options, args);
    if (common && !common->device.is_cpu())
      throw std::runtime_error("--device: the loader benchmark runs on the CPU only");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln_bench_loader: %s\n", e.what());
    return 2;
  }
  if (!common) return 0;
  std::set<std::string> parts;
  {
    std::stringstream list(args["parts"].as<std::string>());
    for (std::string part; std::getline(list, part, ',');) {
      if (part != "loader" && part != "loop" && part != "augment") {
        std::fprintf(stderr, "kiln_bench_loader: --parts: expected loader, loop or augment, found '%s'\n",
                     part.c_str());
        return 2;
      }
      parts.insert(part);
    }
  }
  const int64_t batch_size = args["batch-size"].as<int64_t>(), steps = args["steps"].as<int64_t>();
  at::manual_seed(0);
  const std::vector<DataSet> sets = {fashion_mnist(args["fashion-root"].as<std::string>()),
                                     csv_shaped()};
  nlohmann::json out = nlohmann::json::array();
  std::string load = "?";
  std::getline(std::ifstream("/proc/loadavg"), load);
  std::printf("kiln_bench_loader: batch %lld, shuffled, data and step on the CPU, %d rounds, "
              "%u cores, load average %s\n",
              static_cast<long long>(batch_size), common->rounds,
              std::thread::hardware_concurrency(), load.c_str());
  std::printf("%-24s %7s %-30s %10s %12s %12s %9s %11s\n", "data", "threads", "measure",
              "batches/s", "samples/s", "vs samples/s", "ratio", "ratio q1-q3");
  for (const auto& d : sets) {
    const BatchLoader loader(d.x, d.y, batch_size, /*shuffle=*/true, /*seed=*/0);
    const auto shape = c10::str(d.name, " ", d.x.size(0), "x", d.x.size(1));
    for (const int threads : common->threads) {
      at::set_num_threads(threads);
      // (c) augmentation of one batch of images, kiln's against the per-image twin.
      if (parts.count("augment") && d.x.size(1) == 784) {
        const auto images = loader.batch(0).x.reshape({batch_size, 1, 28, 28});
        const int64_t p = 2;
        const auto flips = at::randint(2, {batch_size}, at::kLong);
        const auto offsets = at::randint(2 * p + 1, {batch_size, 2}, at::kLong);
        if (!at::equal(kiln::data::detail::crop_flip(images, flips, offsets, p, -0.8),
                       crop_flip_per_image(images, flips, offsets, p, -0.8))) {
          std::fprintf(stderr, "kiln_bench_loader: augment: kiln's batch differs from the twin's\n");
          return 1;
        }
        const kb::Case c{"augment", "flip, crop 2",
                         [=] { (void)kiln::data::detail::crop_flip(images, flips, offsets, p, -0.8); },
                         [=] { (void)crop_flip_per_image(images, flips, offsets, p, -0.8); }, 0,
                         "per-image ATen"};
        const auto t = kb::measure(c, common->device, common->rounds, common->min_ms);
        std::printf("%-24s %7d %-30s %10.0f %12.0f %12.0f %9.1f %5.1f-%5.1f\n", shape.c_str(),
                    threads, "augment / per-image ATen", 1e9 / t.kiln_ns, batch_size / t.kiln_ns * 1e9,
                    batch_size / t.ref_ns * 1e9, t.ratio, t.ratio_q1, t.ratio_q3);
        auto row = kb::json_row(c, common->device, "float32", batch_size, threads, t);
        row["data"] = d.name;
        out.push_back(row);
      }
      if (!parts.count("loader") && !parts.count("loop")) continue;
      // (a) per batch: the loader (worker, depth 2; and no worker) against a step.
      const auto fixed = std::make_shared<Batch>(loader.batch(0));
      auto trainer = std::make_shared<Trainer>(d.x.size(1), d.classes);
      const std::function<void()> step = [=] { trainer->step(*fixed); };
      const std::vector<kb::Case> per_batch = {
          {"loader", "depth 2", next_batch(loader, 2), step, 0, "training step"},
          {"loader", "depth 0", next_batch(loader, 0), step, 0, "training step"}};
      for (const auto& c : parts.count("loader") ? per_batch : std::vector<kb::Case>{}) {
        const auto t = kb::measure(c, common->device, common->rounds, common->min_ms);
        std::printf("%-24s %7d %-30s %10.0f %12.0f %12.0f %9.1f %5.1f-%5.1f\n", shape.c_str(),
                    threads, ("loader " + c.pass + " / step").c_str(), 1e9 / t.kiln_ns,
                    batch_size / t.kiln_ns * 1e9, batch_size / t.ref_ns * 1e9, t.ratio, t.ratio_q1,
                    t.ratio_q3);
        auto row = kb::json_row(c, common->device, "float32", d.x.size(0), threads, t);
        row["data"] = d.name;
        out.push_back(row);
      }
      if (!parts.count("loop")) continue;
      // (b) a training loop of `steps` steps, prefetching on against off.
      const kb::Case loop{"train_loop", "depth 2 vs 0", training_loop(trainer, loader, 2, steps),
                          training_loop(trainer, loader, 0, steps), 0, "depth 0"};
      const auto t = kb::measure(loop, common->device, common->rounds, /*min_ms=*/1);
      std::printf("%-24s %7d %-30s %10.0f %12.0f %12.0f %9.3f %5.3f-%5.3f\n", shape.c_str(),
                  threads, "training loop, prefetch 2 / 0", steps / t.kiln_ns * 1e9,
                  steps * batch_size / t.kiln_ns * 1e9, steps * batch_size / t.ref_ns * 1e9,
                  t.ratio, t.ratio_q1, t.ratio_q3);
      auto row = kb::json_row(loop, common->device, "float32", d.x.size(0), threads, t);
      row["data"] = d.name;
      out.push_back(row);
    }
  }
  kb::write_json(common->json, out);
  return 0;
}
