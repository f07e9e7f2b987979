// Data-parallel step time, measured side by side in one run of each process: the
// forward and backward pass alone (no communication), with c10d's Reducer (each bucket
// all-reduced as backward produces it), and with the same buckets all-reduced after
// backward (no overlap); for the mlp also its taped step (no autograd graph) alone and
// with GradientReducer's taped mode (each bucket all-reduced as backward_taped reports
// its gradients), the trainer's data-parallel step for an mlp. Run alone for the one-process figure, or as several processes
// (benchmarks/dist_scaling.sh starts them; torchrun --no-python works too). Rank 0
// prints one JSON line:
//   kiln_bench_dist --model mlp --batch 64 --steps 200 --threads 1
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <cxxopts.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "dist/process_group.h"
#include "dist/reducer.h"
#include "nn/deep_mlp.h"
#include "nn/mlp.h"
#include "ops/ops.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("kiln_bench_dist", "Data-parallel step time: compute alone, Reducer, all-reduce after backward.");
  options.add_options()
      ("model", "mlp (784-512-256-10, the default config's) or deep (784, 8 x 1024, 10)", cxxopts::value<std::string>()->default_value("mlp"))
      ("batch", "examples per process and step", cxxopts::value<int64_t>()->default_value("64"))
      ("steps", "measured steps per mode", cxxopts::value<int64_t>()->default_value("200"))
      ("warmup", "unmeasured steps first", cxxopts::value<int64_t>()->default_value("20"))
      ("threads", "intra-op threads per process", cxxopts::value<int64_t>()->default_value("1"))
      ("bucket-mb", "gradient bucket size", cxxopts::value<double>()->default_value("25"));
  const auto args = options.parse(argc, argv);
  at::set_num_threads(static_cast<int>(args["threads"].as<int64_t>()));
  const auto env = kiln::dist::env_from_environment();
  std::unique_ptr<kiln::dist::Group> group;
  if (env && env->world_size > 1) group = std::make_unique<kiln::dist::Group>(*env, std::chrono::seconds(60));
  const int64_t world = group ? group->size() : 1, rank = group ? group->rank() : 0;
  const int64_t batch = args["batch"].as<int64_t>();

  torch::manual_seed(0);
  torch::nn::AnyModule model;
  const std::string name = args["model"].as<std::string>();
  if (name == "deep") model = torch::nn::AnyModule(kiln::nn::DeepMlp(kiln::nn::DeepMlpOptions(784, 10).layers(8).width(1024)));
  else model = torch::nn::AnyModule(kiln::nn::Mlp(kiln::nn::MlpOptions(784, {512, 256}, 10)));
  auto params = model.ptr()->parameters();
  int64_t numel = 0;
  for (const auto& p : params) numel += p.numel();
  const auto x = at::randn({batch, 784});
  const auto y = at::randint(0, 10, {batch}, at::kLong);
  const auto bucket_bytes = static_cast<int64_t>(args["bucket-mb"].as<double>() * (1 << 20));
  std::optional<kiln::dist::GradientReducer> reducer, taped_reducer;
  if (group) reducer.emplace(*group, params, bucket_bytes);
  auto* mlp = model.ptr()->as<kiln::nn::Mlp>();
  if (group && mlp) taped_reducer.emplace(*group, params, bucket_bytes, /*find_unused=*/false, /*taped=*/true);
  kiln::nn::MlpTape tape;

  enum Mode { kLocal, kReducer, kAfter, kTapedLocal, kTaped };
  const auto step = [&](Mode mode) {
    for (auto& p : params) p.mutable_grad() = at::Tensor();
    if (mode == kTapedLocal || mode == kTaped) {  // the trainer's taped step (train::taped_loss's ops)
      const auto logits = mlp->forward_taped(x, tape);
      at::AutoDispatchBelowADInplaceOrView below;
      const auto [loss, lse] = kiln::ops::cross_entropy_forward(logits, y);
      mlp->backward_taped(kiln::ops::cross_entropy_backward(at::ones({}), logits, y, lse), tape, false,
                          mode == kTaped ? [&](const at::Tensor& p) { taped_reducer->grad_ready(p); }
                                         : std::function<void(const at::Tensor&)>());
      if (mode == kTaped) taped_reducer->finish_taped();
      return;
    }
    if (mode == kReducer) reducer->prepare_for_forward();
    auto loss = kiln::ops::cross_entropy(model.forward(x), y);
    if (mode == kReducer) reducer->prepare_for_backward(loss);
    loss.backward();
    if (mode == kAfter) {  // the Reducer's buckets, each all-reduced once backward is done
      for (const auto& b : reducer->buckets()) {
        std::vector<at::Tensor> grads;
        for (const size_t i : b) grads.push_back(params[i].grad().reshape(-1));
        std::vector<at::Tensor> flat{at::cat(grads)};
        group->all_reduce_sum_(flat);
        flat[0].div_(static_cast<double>(world));
        int64_t at = 0;
        for (const size_t i : b) {
          params[i].grad().copy_(flat[0].narrow(0, at, params[i].numel()).view_as(params[i]));
          at += params[i].numel();
        }
      }
    }
  };
  std::vector<Mode> modes = {kLocal};
  if (group) modes.insert(modes.end(), {kReducer, kAfter});
  if (mlp) modes.push_back(kTapedLocal);
  if (group && mlp) modes.push_back(kTaped);
  for (int64_t i = 0; i < args["warmup"].as<int64_t>(); ++i)
    for (const auto m : modes) step(m);
  std::map<Mode, std::vector<double>> ms;
  for (int64_t i = 0; i < args["steps"].as<int64_t>(); ++i)
    for (const auto m : modes) {  // interleaved: every mode sees the same machine
      if (group) group->barrier();  // the processes start each step together
      const auto t0 = Clock::now();
      step(m);
      ms[m].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  if (rank != 0) return 0;
  nlohmann::ordered_json out = {{"model", name}, {"parameters", numel}, {"processes", world},
                                {"batch_per_process", batch}, {"threads", at::get_num_threads()},
                                {"buckets", reducer ? reducer->buckets().size() : 0}};
  const double local = median(ms[kLocal]);
  out["compute_ms"] = local;
  out["compute_samples_per_s"] = batch * world / local * 1e3;
  if (group) {
    const double red = median(ms[kReducer]), after = median(ms[kAfter]);
    out["reducer_ms"] = red;
    out["after_backward_ms"] = after;
    out["samples_per_s"] = batch * world / red * 1e3;
    out["communication_ms_reducer"] = red - local;
    out["communication_ms_after_backward"] = after - local;
  } else {
    out["samples_per_s"] = batch / local * 1e3;
  }
  if (mlp) {
    const double taped_local = median(ms[kTapedLocal]);
    out["taped_compute_ms"] = taped_local;
    if (group) {
      const double taped = median(ms[kTaped]);
      out["taped_ms"] = taped;
      out["taped_samples_per_s"] = batch * world / taped * 1e3;
      out["communication_ms_taped"] = taped - taped_local;
    }
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
