// kiln_bench_memory: what activation checkpointing buys and costs — the deep MLP
// (50 × 1024 by default) plain against checkpointed every 5 layers, in one run,
// interleaved round by round: activation memory of a step and step time, with ratios.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <cxxopts.hpp>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>


#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>

#include "nn/deep_mlp.h"
#include "ops/ops.h"
#include "train/memory.h"

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

void sync(const at::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize();
}

struct StepFigures {
  double ns = 0;                 // forward + backward
  int64_t held_bytes = 0;        // allocated after forward minus before it: the saved activations
  int64_t activation_bytes = 0;  // kiln::train::ActivationProbe: CPU as held; CUDA the step's peak
};

// Bytes allocated now on the device: the CUDA caching allocator's count or the CPU heap's.
int64_t allocated_now(const at::Device& device) {
  if (device.is_cuda()) return kiln::train::cuda_memory(device.index())->allocated_bytes;
  return kiln::train::heap_bytes_in_use();
}

// One training step with memory measured around it. The gradients already exist
// and are zeroed in place, so the figures count activations (and backward's
// transients), not the gradients' own storage.
StepFigures step(kiln::nn::DeepMlp& net, const at::Tensor& x, const at::Tensor& target,
                 const at::Device& device) {
  net->zero_grad(/*set_to_none=*/false);
  sync(device);
  StepFigures f;
  kiln::train::ActivationProbe probe(device);
  const int64_t before = allocated_now(device);
  const auto t0 = std::chrono::steady_clock::now();
  auto loss = kiln::ops::cross_entropy(net->forward(x), target);
  probe.forward_done();
  f.held_bytes = allocated_now(device) - before;
  loss.backward();
  sync(device);
  f.ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  f.activation_bytes = probe.bytes();
  return f;
}

template <typename T>
T median(std::vector<T> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

int run(int argc, char** argv) {
  cxxopts::Options options("kiln_bench_memory",
                           "DeepMlp plain against activation-checkpointed: activation memory and step time");
  options.add_options()
      ("layers", "hidden layers", cxxopts::value<int64_t>()->default_value("50"))
      ("width", "hidden width (and input features)", cxxopts::value<int64_t>()->default_value("1024"))
      ("every", "checkpoint every this many layers", cxxopts::value<int64_t>()->default_value("5"))
      ("batch", "batch size", cxxopts::value<int64_t>()->default_value("256"))
      ("activation", "relu or gelu", cxxopts::value<std::string>()->default_value("relu"))
      ("dropout", "dropout probability", cxxopts::value<double>()->default_value("0"))
      ("device", "cpu or cuda", cxxopts::value<std::string>()->default_value("cpu"))
      ("dtype", "float32, bfloat16 or float16", cxxopts::value<std::string>()->default_value("float32"))
      ("threads", "CPU threads (0: libtorch's default)", cxxopts::value<int>()->default_value("0"))
      ("rounds", "interleaved rounds (median reported)", cxxopts::value<int>()->default_value("5"))
      ("json", "write the results to FILE", cxxopts::value<std::string>()->default_value(""))
      ("h,help", "show this help");
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::puts(options.help().c_str());
    return 0;
  }
  at::Device device(args["device"].as<std::string>());
  if (device.is_cuda() && !device.has_index()) device = at::Device(at::kCUDA, 0);
  if (device.is_cuda() && !torch::cuda::is_available()) {
    std::fprintf(stderr, "kiln_bench_memory: --device cuda: no CUDA device is visible\n");
    return 2;
  }
  const std::map<std::string, at::ScalarType> dtypes = {
      {"float32", at::kFloat}, {"bfloat16", at::kBFloat16}, {"float16", at::kHalf}};
  const auto dname = args["dtype"].as<std::string>();
  if (!dtypes.count(dname)) {
    std::fprintf(stderr, "kiln_bench_memory: --dtype: expected float32, bfloat16 or float16, got '%s'\n",
                 dname.c_str());
    return 2;
  }
  if (const int t = args["threads"].as<int>(); t > 0) at::set_num_threads(t);
  const int64_t layers = args["layers"].as<int64_t>(), width = args["width"].as<int64_t>();
  const int64_t every = args["every"].as<int64_t>(), batch = args["batch"].as<int64_t>();
  const int rounds = std::max(1, args["rounds"].as<int>());
  if (every <= 0 || batch <= 0) {
    std::fprintf(stderr, "kiln_bench_memory: --every and --batch: expected > 0\n");
    return 2;
  }

  constexpr int64_t kClasses = 10;
  const auto base = kiln::nn::DeepMlpOptions(width, kClasses)
                        .layers(layers)
                        .width(width)
                        .activation(args["activation"].as<std::string>())
                        .dropout(args["dropout"].as<double>());
  torch::manual_seed(0);
  kiln::nn::DeepMlp plain(base), ckpt(kiln::nn::DeepMlpOptions(base).checkpoint_every(every));
  plain->to(device, dtypes.at(dname));
  ckpt->to(device, dtypes.at(dname));
  const auto x = at::randn({batch, width}, at::TensorOptions().device(device).dtype(dtypes.at(dname)));
  const auto target = at::randint(kClasses, {batch}, at::TensorOptions().device(device).dtype(at::kLong));

  // Warm-up: allocates the gradients, fills the allocator's and the CPU's caches.
  step(plain, x, target, device);
  step(ckpt, x, target, device);
  std::vector<StepFigures> p, c;
  for (int i = 0; i < rounds; ++i) {
    // Alternate which side goes first, so neither always inherits the other's state.
    if (i % 2 == 0) {
      p.push_back(step(plain, x, target, device));
      c.push_back(step(ckpt, x, target, device));
    } else {
      c.push_back(step(ckpt, x, target, device));
      p.push_back(step(plain, x, target, device));
    }
  }
  // Medians over the rounds of one figure of each side.
  auto med = [](const std::vector<StepFigures>& v, auto field) {
    std::vector<double> out;
    for (const auto& f : v) out.push_back(static_cast<double>(f.*field));
    return median(out);
  };
  const double plain_ns = med(p, &StepFigures::ns), ckpt_ns = med(c, &StepFigures::ns);
  const double plain_held = med(p, &StepFigures::held_bytes), ckpt_held = med(c, &StepFigures::held_bytes);
  const double plain_act = med(p, &StepFigures::activation_bytes), ckpt_act = med(c, &StepFigures::activation_bytes);
  // The headline is ActivationProbe's figure, the one training runs report: on CUDA
  // the step's peak (it includes one segment's recomputation), on CPU what forward
  // leaves held (glibc keeps no peak).
  const double memory_ratio = ckpt_act / plain_act;
  const double time_ratio = ckpt_ns / plain_ns;
  const int threads = device.is_cuda() ? 0 : at::get_num_threads();

  std::printf("kiln_bench_memory: DeepMlp %lld x %lld, batch %lld, checkpoint every %lld, %s %s, "
              "%d threads, median of %d rounds\n",
              static_cast<long long>(layers), static_cast<long long>(width), static_cast<long long>(batch),
              static_cast<long long>(every), device.str().c_str(), dname.c_str(), threads, rounds);
  std::printf("%-14s %18s %18s %10s\n", "", "held after fwd MiB", "peak in step MiB", "step ms");
  auto line = [&](const char* name, double held, double act, double t) {
    char peak[32] = "-";
    if (device.is_cuda()) std::snprintf(peak, sizeof peak, "%.1f", act / kMiB);
    std::printf("%-14s %18.1f %18s %10.1f\n", name, held / kMiB, peak, t / 1e6);
  };
  line("plain", plain_held, plain_act, plain_ns);
  line("checkpointed", ckpt_held, ckpt_act, ckpt_ns);
  std::printf("ckpt / plain: activation memory %.3f (%s; goal <= 0.30), step time %.3f (goal <= 1.35)\n",
              memory_ratio, device.is_cuda() ? "peak in step" : "held after forward", time_ratio);

  if (const auto path = args["json"].as<std::string>(); !path.empty()) {
    const nlohmann::json row = {
        {"op", "deep_mlp_checkpoint"}, {"pass", "step"}, {"device", device.str()}, {"dtype", dname},
        {"size", batch * width}, {"threads", threads}, {"kiln_ns", ckpt_ns}, {"ref_ns", plain_ns},
        {"ratio", plain_ns / ckpt_ns}, {"layers", layers}, {"width", width}, {"batch", batch},
        {"checkpoint_every", every}, {"kiln_held_bytes", ckpt_held}, {"ref_held_bytes", plain_held},
        {"kiln_activation_bytes", ckpt_act}, {"ref_activation_bytes", plain_act},
        {"activation_measure", device.is_cuda() ? "peak in step" : "held after forward"},
        {"memory_ratio", memory_ratio}, {"step_time_ratio", time_ratio}};
    std::ofstream(path) << nlohmann::json::array({row}).dump(1) << '\n';
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const c10::Error& e) {  // DeepMlp's option checks
    std::fprintf(stderr, "kiln_bench_memory: %s\n", e.what_without_backtrace());
    return 2;
  } catch (const std::exception& e) {  // a bad option (cxxopts)
    std::fprintf(stderr, "kiln_bench_memory: %s\n", e.what());
    return 2;
  }
}
