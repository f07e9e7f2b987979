// kiln_bench_train: kiln's training step against its Python twin, side by side.
//
// For each batch size, ROUNDS rounds of: kiln trains the config in this process (the
// library loop `kiln train` runs, with no console) for WARMUP + STEPS steps, each
// timed after the warm-up by the loop's own step reports; then the step's floor: its
// matrix products and kiln's fused AdamW alone, back to back, on tensors of the
// model's shapes; then the Python twin (benchmarks/twins/mlp_twin.py, run by the torch
// wheel's Python: the same libtorch and thread count) runs the same steps and prints
// each one's time; then a GEMM of 2048³ in the run's precision measures the machine's
// peak. The sides alternate so that machine noise hits both, each after the same
// idle pause (--rest); many short rounds beat a few long ones on a shared machine.
// Printed per batch size and per statistic of the step times (mean, median, tenth
// percentile: this machine's neighbours slow it for seconds at a time and only ever
// add time): each side's ms, their ratio (kiln steps/s ÷ Python steps/s, > 1: kiln is
// faster) taken in each round, its median and quartiles over the rounds, the floor
// and the ceiling it puts on the ratio (python ÷ floor), and the reached GFLOP/s
// against the GEMM peak. With two precisions (--precision fp32,bf16) each round runs
// all of that in each, and the speed-up of the second over the first (kiln's step,
// the twin's, the floor's, the 2048³ GEMM's) is paired per round too. Both sides run
// under kiln's heap policy (util/heap.h: freed memory kept, large tensors on huge pages).
// With --device cuda both sides train on the GPU (the data set on the device), each
// step's time ending with a device synchronisation on both sides, the floor's GEMMs and
// AdamW run there, and the peak is an 8192³ GEMM.
//
//   kiln_bench_train [--config configs/fashion_mlp.toml] [--batches 128,32]
//                    [--steps 200] [--warmup 50] [--rounds 3] [--threads 2]
//                    [--precision fp32|bf16|fp32,bf16] [--device cpu|cuda]
//                    [--compile] [--python PATH]
//                    [--json FILE]
//                    [--rest 2] [--each] [--set section.key=value ...]
//
// The model must be an MLP trained by AdamW (the twin is that model); the steps must
// end before the epoch does (no evaluation inside the timed window).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <cxxopts.hpp>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "bench_support.h"  // quantile
#include "config.h"
#include "ops/ops.h"
#include "train/trainer.h"
#include "train_command.h"
#include "util/error.h"
#include "util/files.h"
#include "util/heap.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using kiln::bench::quantile;

namespace {

// The time of each step's report: step i's time is the end of step i (on CUDA, once
// its kernels are done: the report comes when the host has queued them).
struct StepClock : kiln::train::TrainObserver {
  bool cuda = false;
  std::vector<Clock::time_point> at;
  void on_step(const kiln::train::StepReport&) override {
    if (cuda) torch::cuda::synchronize();
    at.push_back(Clock::now());
  }
};

// The widths of an MLP's layers, input to output.
std::vector<int64_t> mlp_widths(const kiln::nn::MlpOptions& m) {
  std::vector<int64_t> widths{m.in_features()};
  widths.insert(widths.end(), m.hidden().begin(), m.hidden().end());
  widths.push_back(m.out_features());
  return widths;
}

// FLOPs of one training step of an MLP: forward 2·B·in·out per layer, backward the
// weight gradient (as much again) and the input gradient for every layer but the
// first (whose input needs none). Biases, activations and the loss are left out.
double mlp_step_flops(const kiln::nn::MlpOptions& m, int64_t batch) {
  const auto widths = mlp_widths(m);
  double flops = 0;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    const double layer = 2.0 * static_cast<double>(batch * widths[i] * widths[i + 1]);
    flops += (i == 0 ? 2.0 : 3.0) * layer;
  }
  return flops;
}

// The step's floor: ms per step of nothing but its matrix products (each layer's
// forward, weight gradient and, but for the first layer, input gradient, through
// kiln::linear and kiln::linear_backward: the same GEMM paths, oneDNN or BLAS, and the
// same shapes and transposes as kiln's step, in `dtype`) and kiln's fused AdamW over
// float32 parameters of the model's shapes (autocast keeps them in float32), timed for
// each of `steps` after `warmup`. No step built on these GEMMs and this optimizer is
// faster, so the twin's ms ÷ this is the highest ratio to the twin such a step can reach.
std::vector<double> floor_ms(const kiln::nn::MlpOptions& m, int64_t batch, int64_t warmup,
                             int64_t steps, at::ScalarType dtype, const at::Device& device) {
  const auto widths = mlp_widths(m);
  const auto opt = at::TensorOptions().dtype(dtype).device(device);
  const auto f32 = at::TensorOptions().device(device);
  const bool fp32 = dtype == at::kFloat;
  std::vector<at::Tensor> act{at::randn({batch, widths[0]}, opt)}, grad_act, ws, bs;
  std::vector<at::Tensor> params, grads, ms, vs;  // the optimizer's, float32
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    const std::vector<int64_t> weight{widths[i + 1], widths[i]}, bias{widths[i + 1]};
    for (const auto* shape : {&weight, &bias}) {
      params.push_back(at::randn(*shape, f32) * 0.05);
      grads.push_back(at::randn(*shape, f32) * 1e-3);
      ms.push_back(at::zeros(*shape, f32));
      vs.push_back(at::zeros(*shape, f32));
    }
    // In float32 the GEMMs use the parameters and make the gradients the optimizer
    // reads, as a step does; in bf16 they work on copies of their own.
    ws.push_back(fp32 ? params[2 * i] : params[2 * i].to(dtype));
    bs.push_back(fp32 ? params[2 * i + 1] : params[2 * i + 1].to(dtype));
    act.push_back(at::Tensor());
    grad_act.push_back(at::randn({batch, widths[i]}, opt));
  }
  grad_act.push_back(at::randn({batch, widths.back()}, opt));
  int64_t step = 0;
  const auto one_step = [&] {
    for (size_t i = 0; i < ws.size(); ++i) act[i + 1] = kiln::ops::linear(act[i], ws[i], bs[i]);
    for (size_t i = ws.size(); i-- > 0;) {
      auto dw = std::get<1>(kiln::ops::linear_backward(grad_act[i + 1], act[i], ws[i], {i > 0, true, false}));
      if (fp32) grads[2 * i] = std::move(dw);
    }
    kiln::ops::fused_adamw_(params, grads, ms, vs, 1e-3, 0.9, 0.999, 1e-2, 1e-8, ++step);
  };
  for (int64_t i = 0; i < warmup; ++i) one_step();
  kiln::bench::sync(device);
  std::vector<double> ms_each;
  for (int64_t i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    one_step();
    kiln::bench::sync(device);
    ms_each.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return ms_each;
}

// The side of the square GEMM that measures a device's peak: 2048 on the CPU, 8192 on
// a GPU (where 2048³ takes microseconds, under its launch's cost).
int64_t peak_size(const at::Device& device) { return device.is_cuda() ? 8192 : 2048; }

// GFLOP/s of an n×n by n×n matrix product in `dtype` with the current threads: the best
// of a few timed calls after one untimed.
double gemm_peak(at::ScalarType dtype, const at::Device& device) {
  const int64_t n = peak_size(device);
  const auto opt = at::TensorOptions().device(device);
  const auto a = at::randn({n, n}, opt).to(dtype), b = at::randn({n, n}, opt).to(dtype);
  auto c = at::mm(a, b);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    kiln::bench::sync(device);
    const auto t0 = Clock::now();
    at::mm_out(c, a, b);
    kiln::bench::sync(device);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, 2.0 * static_cast<double>(n * n * n) / s / 1e9);
  }
  return best;
}

// kiln's ms for each step after the warm-up, in this process: the time between a
// step's report and the one before it.
std::vector<double> kiln_ms(kiln::train::RunSpec spec, const fs::path& run_dir, int64_t warmup,
                            int64_t steps, bool cuda) {
  spec.run_dir = run_dir.string();
  StepClock clock;
  clock.cuda = cuda;
  kiln::train::train(spec, clock);
  kiln::files::remove_tree(run_dir.string());
  if (static_cast<int64_t>(clock.at.size()) != warmup + steps)
    throw std::runtime_error("kiln ran " + std::to_string(clock.at.size()) + " steps, expected " +
                             std::to_string(warmup + steps));
  std::vector<double> ms_each;
  for (auto i = static_cast<size_t>(warmup); i < clock.at.size(); ++i)
    ms_each.push_back(std::chrono::duration<double, std::milli>(clock.at[i] - clock.at[i - 1]).count());
  return ms_each;
}

// What a side's step times give: their mean (the steps per second over the whole
// window), their median (a typical step) and their tenth percentile (the steps the
// shared machine's neighbours left alone: its noise only ever adds time).
constexpr std::array<const char*, 3> kStats = {"mean", "median", "p10"};
constexpr size_t kMedian = 1;  // kStats' index of the median
std::array<double, 3> step_stats(const std::vector<double>& ms_each) {
  double sum = 0;
  for (const double v : ms_each) sum += v;
  return {sum / static_cast<double>(ms_each.size()), quantile(ms_each, 0.5), quantile(ms_each, 0.1)};
}

// Runs a command and returns its last line of standard output; throws naming the
// command when it fails.
std::string last_line_of(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) throw std::runtime_error("cannot run: " + command);
  std::string line, last;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), pipe.get())) {
    line += buf.data();
    if (!line.empty() && line.back() == '\n') {
      if (line.size() > 1) last = line.substr(0, line.size() - 1);
      line.clear();
    }
  }
  if (!line.empty()) last = line;
  const int status = pclose(pipe.release());
  if (status != 0) throw std::runtime_error("failed (status " + std::to_string(status) + "): " + command);
  return last;
}

std::string shell_quoted(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Each timed step's ms, from the step_ms of the JSON line the twin's command prints.
std::vector<double> twin_ms(const std::string& command) {
  return nlohmann::json::parse(last_line_of(command))["step_ms"].get<std::vector<double>>();
}

// The torch wheel's Python that scripts/setup installs (scripts/versions.sh).
std::string default_python() {
  if (const char* p = std::getenv("KILN_PYTHON")) return p;
  const char* home = std::getenv("KILN_HOME");
  const fs::path base = home ? fs::path(home) : fs::path(std::getenv("HOME") ? std::getenv("HOME") : "/root") / ".local/share/kiln";
  for (const auto& entry : fs::directory_iterator(base))
    if (entry.path().filename().string().rfind("torch-", 0) == 0 && fs::exists(entry.path() / "bin/python"))
      return (entry.path() / "bin/python").string();
  throw std::runtime_error("no torch virtual environment under " + base.string() +
                           " (scripts/setup makes one; or pass --python)");
}

}  // namespace

int main(int argc, char** argv) {
  // kiln's executable's heap policy, before the first tensor; the twin gets the same
  // through its environment (policy_environment below).
  kiln::heap::set_training_policy();
  cxxopts::Options options("kiln_bench_train", "kiln's training step against its Python twin, side by side");
  options.add_options()
      ("config", "an MLP config", cxxopts::value<std::string>()->default_value(KILN_SOURCE_DIR "/configs/fashion_mlp.toml"))
      ("batches", "batch sizes", cxxopts::value<std::vector<int64_t>>()->default_value("128,32"))
      ("steps", "timed steps per round", cxxopts::value<int64_t>()->default_value("200"))
      ("warmup", "untimed steps first", cxxopts::value<int64_t>()->default_value("50"))
      ("rounds", "rounds (kiln, Python, GEMM) per batch size", cxxopts::value<int>()->default_value("3"))
      ("threads", "CPU threads on both sides", cxxopts::value<int>()->default_value("2"))
      ("precision", "fp32, bf16 (autocast on both sides), or both (= fp32,bf16), paired per round", cxxopts::value<std::vector<std::string>>()->default_value("fp32"))
      ("device", "cpu or cuda: where both sides train", cxxopts::value<std::string>()->default_value("cpu"))
      ("compile", "also time the twin under torch.compile")
      ("each", "also print every round's medians")
      ("rest", "idle seconds before each side's run", cxxopts::value<double>()->default_value("2"))
      ("python", "the Python that runs the twin", cxxopts::value<std::string>()->default_value(""))
      ("set", "a config override section.key=value (repeatable)", cxxopts::value<std::vector<std::string>>()->default_value(""))
      ("json", "write the results to FILE", cxxopts::value<std::string>()->default_value(""))
      ("h,help", "show this help");
  try {
    const auto args = options.parse(argc, argv);
    if (args.count("help")) {
      std::puts(options.help().c_str());
      return 0;
    }
    const auto batches = args["batches"].as<std::vector<int64_t>>();
    const int64_t steps = args["steps"].as<int64_t>(), warmup = args["warmup"].as<int64_t>();
    const int rounds = args["rounds"].as<int>(), threads = args["threads"].as<int>();
    auto precisions = args["precision"].as<std::vector<std::string>>();
    if (precisions == std::vector<std::string>{"both"}) precisions = {"fp32", "bf16"};
    if (steps < 1 || warmup < 1 || rounds < 1 || threads < 1)
      throw kiln::InputError("--steps, --warmup, --rounds and --threads: expected >= 1");
    for (const auto& precision : precisions)
      if (precision != "fp32" && precision != "bf16")
        throw kiln::InputError("--precision: expected fp32, bf16 or both (fp32,bf16), found \"" + precision + "\"");
    for (size_t i = 0; i < precisions.size(); ++i)
      if (std::find(precisions.begin(), precisions.begin() + static_cast<std::ptrdiff_t>(i), precisions[i]) !=
          precisions.begin() + static_cast<std::ptrdiff_t>(i))
        throw kiln::InputError("--precision: \"" + precisions[i] + "\" is listed twice");
    const std::string device_name = args["device"].as<std::string>();
    if (device_name != "cpu" && device_name != "cuda")
      throw kiln::InputError("--device: expected cpu or cuda, found \"" + device_name + "\"");
    if (device_name == "cuda" && !torch::cuda::is_available())
      throw kiln::InputError("--device cuda: this machine has no CUDA device");
    const at::Device device(device_name == "cuda" ? at::kCUDA : at::kCPU);
    std::string precision_list;
    for (const auto& precision : precisions) precision_list += (precision_list.empty() ? "" : ",") + precision;
    const std::string python = args["python"].as<std::string>().empty() ? default_python()
                                                                          : args["python"].as<std::string>();
    const std::string twin = KILN_SOURCE_DIR "/benchmarks/twins/mlp_twin.py";
    std::vector<std::string> sets;
    for (const auto& s : args["set"].as<std::vector<std::string>>())
      if (!s.empty()) sets.push_back(s);
    const bool compile = args.count("compile") > 0, each = args.count("each") > 0;
    const double rest_s = args["rest"].as<double>();
    if (rest_s < 0) throw kiln::InputError("--rest: expected seconds >= 0, found " + std::to_string(rest_s));
    // Every side starts its run after the same idle pause. On the 2-core virtual
    // machine a run that followed the previous side's at full load stalled for 40 ms
    // every ~100 ms (the host's CPU quota, refilled while the guest idles), which hit
    // kiln's runs (after the GEMM peak) and not the twin's (after Python's start-up,
    // one thread for seconds); 3 s of idle before kiln's run took the stalls away.
    const auto rest = [rest_s] { usleep(static_cast<useconds_t>(rest_s * 1e6)); };

    const fs::path tmp = fs::temp_directory_path() / ("kiln_bench_train." + std::to_string(getpid()));
    nlohmann::json rows = nlohmann::json::array();
    std::printf("kiln_bench_train: %s, %s on %s, %d threads, %lld warm-up + %lld timed steps, %d rounds\n",
                args["config"].as<std::string>().c_str(), precision_list.c_str(), device_name.c_str(), threads,
                static_cast<long long>(warmup), static_cast<long long>(steps), rounds);
    std::printf("%s; the twin runs with %s\n", kiln::heap::policy().c_str(),
                kiln::heap::policy_environment().c_str());
    const auto header = [] {
      std::printf("%6s %5s %7s %9s %9s %6s %11s %9s %8s %8s %9s %8s %8s\n", "batch", "prec", "steps", "kiln ms",
                  "python ms", "ratio", "ratio q1-q3", "floor ms", "ceiling", "k/floor", "kiln GF/s",
                  "py GF/s", "k/peak");
    };
    if (!each) header();
    std::vector<double> best_peak(precisions.size(), 0.0);
    for (const int64_t batch : batches) {
      // One side per precision: its run spec, its twin's command and, per statistic
      // (kStats), each round's value.
      struct Side {
        std::string precision;
        kiln::train::RunSpec spec;
        std::string command;
        at::ScalarType dtype;
        std::array<std::vector<double>, 3> k, p, pc, f;
        std::vector<double> peaks;
      };
      std::vector<Side> sides;
      for (const auto& precision : precisions) {
        auto overrides = sets;
        for (const auto& o : {"train.batch_size=" + std::to_string(batch),
                              "train.max_steps=" + std::to_string(warmup + steps),
                              "train.threads=" + std::to_string(threads), "train.precision=\"" + precision + "\"",
                              "train.device=\"" + device_name + "\"",
                              std::string("train.eval_every=0"), std::string("checkpoint.every=0"),
                              std::string("profile.steps=\"\""), std::string("tensorboard.histogram_every=0")})
          overrides.push_back(o);
        const auto config = kiln::app::resolve_config(args["config"].as<std::string>(), overrides);
        auto spec = kiln::app::to_run_spec(config);
        spec.config_toml = "# kiln_bench_train\n";
        if (spec.model.name != "mlp" || spec.optim.name != "adamw")
          throw kiln::InputError("--config: expected an mlp model trained by adamw (the twin's), found model " +
                                 spec.model.name + " with " + spec.optim.name);
        std::string hidden;
        for (const auto h : spec.model.mlp.hidden()) hidden += (hidden.empty() ? "" : ",") + std::to_string(h);
        char numbers[128];
        std::snprintf(numbers, sizeof numbers, " --lr %.17g --weight-decay %.17g --log-every %lld",
                      spec.optim.lr.value_or(1e-3), spec.optim.weight_decay.value_or(1e-2),
                      static_cast<long long>(spec.train.log_every()));
        const std::string command = kiln::heap::policy_environment() + " " + shell_quoted(python) + " " +
                                    shell_quoted(twin) + " --batch-size " + std::to_string(batch) +
                                    " --steps " + std::to_string(steps) + " --warmup " + std::to_string(warmup) +
                                    " --threads " + std::to_string(threads) + " --precision " + precision +
                                    " --hidden " + shell_quoted(hidden) + " --device " + device_name + numbers;
        sides.push_back({precision, spec, command, precision == "bf16" ? at::kBFloat16 : at::kFloat, {}, {}, {}, {}, {}});
      }
      // The in-features the data gave the model (784 for Fashion-MNIST): the config's
      // model.mlp is completed by the trainer; the twin's first layer is 784 wide. The
      // same model in every precision.
      auto mlp = sides.front().spec.model.mlp;
      mlp.in_features(784).out_features(10);
      const auto add = [](std::array<std::vector<double>, 3>& to, const std::vector<double>& ms_each) {
        const auto st = step_stats(ms_each);
        for (size_t i = 0; i < st.size(); ++i) to[i].push_back(st[i]);
      };
      for (int r = 0; r < rounds; ++r) {
        for (auto& s : sides) {
          rest();
          add(s.k, kiln_ms(s.spec, tmp / ("run" + std::to_string(r)), warmup, steps, device.is_cuda()));
          rest();
          at::set_num_threads(threads);
          add(s.f, floor_ms(mlp, batch, warmup, steps, s.dtype, device));  // next to kiln's, for k/floor
          rest();
          add(s.p, twin_ms(s.command));
          if (compile) rest(), add(s.pc, twin_ms(s.command + " --compile"));
          s.peaks.push_back(gemm_peak(s.dtype, device));
          if (each)
            std::printf("  batch %lld %s round %d: median ms kiln %.3f, floor %.3f, python %.3f; ratio %.2f\n",
                        static_cast<long long>(batch), s.precision.c_str(), r + 1, s.k[kMedian].back(),
                        s.f[kMedian].back(), s.p[kMedian].back(), s.p[kMedian].back() / s.k[kMedian].back());
        }
      }
      const double flops = mlp_step_flops(mlp, batch);
      if (each) header();  // under the rounds' lines
      for (size_t pi = 0; pi < sides.size(); ++pi) {
        const auto& s = sides[pi];
        const double peak = *std::max_element(s.peaks.begin(), s.peaks.end());
        best_peak[pi] = std::max(best_peak[pi], peak);
        nlohmann::json row = {{"batch", batch}, {"precision", s.precision}, {"device", device_name}, {"threads", threads},
                              {"step_gflop", flops / 1e9}, {"gemm_peak_gflops", peak}};
        for (size_t si = 0; si < kStats.size(); ++si) {
          // The ratios are paired within a round (the machine's speed drifts between
          // rounds), then the median over rounds.
          std::vector<double> ratios, ceilings, over_floor, compiled;
          for (int r = 0; r < rounds; ++r) {
            ratios.push_back(s.p[si][r] / s.k[si][r]);
            ceilings.push_back(s.p[si][r] / s.f[si][r]);
            over_floor.push_back(s.k[si][r] / s.f[si][r]);
            if (compile) compiled.push_back(s.pc[si][r] / s.k[si][r]);
          }
          const double km = quantile(s.k[si], 0.5), pm = quantile(s.p[si], 0.5), fm = quantile(s.f[si], 0.5);
          const double ratio = quantile(ratios, 0.5), ceiling = quantile(ceilings, 0.5);
          std::printf("%6lld %5s %7s %9.3f %9.3f %6.2f %5.2f-%5.2f %9.3f %8.2f %8.2f %9.1f %8.1f %8.2f\n",
                      static_cast<long long>(batch), s.precision.c_str(), kStats[si], km, pm, ratio,
                      quantile(ratios, 0.25), quantile(ratios, 0.75), fm, ceiling, quantile(over_floor, 0.5),
                      flops / km / 1e6, flops / pm / 1e6, flops / km / 1e6 / peak);
          nlohmann::json by = {{"kiln_ms", km}, {"python_ms", pm}, {"ratio", ratio},
                               {"ratio_q1", quantile(ratios, 0.25)}, {"ratio_q3", quantile(ratios, 0.75)},
                               {"kiln_gflops", flops / km / 1e6}, {"python_gflops", flops / pm / 1e6},
                               {"floor_ms", fm}, {"ceiling_ratio", ceiling},
                               {"kiln_over_floor", quantile(over_floor, 0.5)}};
          if (compile) {
            const double cm = quantile(s.pc[si], 0.5);
            std::printf("%6s %5s %7s %9s %9.3f %6.2f  (torch.compile twin)\n", "", "", "", "", cm,
                        quantile(compiled, 0.5));
            by["python_compiled_ms"] = cm;
            by["ratio_compiled"] = quantile(compiled, 0.5);
          }
          row[kStats[si]] = by;
          if (si == 0) row.update(by);  // the mean's figures also at the top, as before
        }
        rows.push_back(row);
      }
      // Each later precision against the first (bf16 against fp32), paired per round:
      // the speed-up of kiln's step, of the twin's, of the floor and of the 2048³ GEMM.
      for (size_t pi = 1; pi < sides.size(); ++pi) {
        const auto &a = sides[0], &b = sides[pi];
        for (size_t si = 0; si < kStats.size(); ++si) {
          std::vector<double> kr, pr, fr;
          for (int r = 0; r < rounds; ++r) {
            kr.push_back(a.k[si][r] / b.k[si][r]);
            pr.push_back(a.p[si][r] / b.p[si][r]);
            fr.push_back(a.f[si][r] / b.f[si][r]);
          }
          std::printf("%6lld %s÷%s %s: kiln %.2fx (%.2f-%.2f), python %.2fx (%.2f-%.2f), floor %.2fx\n",
                      static_cast<long long>(batch), b.precision.c_str(), a.precision.c_str(), kStats[si],
                      quantile(kr, 0.5), quantile(kr, 0.25), quantile(kr, 0.75), quantile(pr, 0.5),
                      quantile(pr, 0.25), quantile(pr, 0.75), quantile(fr, 0.5));
          rows.push_back({{"batch", batch}, {"speedup", b.precision + "/" + a.precision}, {"statistic", kStats[si]},
                          {"kiln", quantile(kr, 0.5)}, {"python", quantile(pr, 0.5)}, {"floor", quantile(fr, 0.5)}});
        }
        std::vector<double> gr;
        for (int r = 0; r < rounds; ++r) gr.push_back(b.peaks[r] / a.peaks[r]);
        std::printf("%6lld %s÷%s %lld³ GEMM: %.2fx\n", static_cast<long long>(batch), b.precision.c_str(),
                    a.precision.c_str(), static_cast<long long>(peak_size(device)), quantile(gr, 0.5));
      }
    }
    std::string peaks;
    for (size_t pi = 0; pi < precisions.size(); ++pi) {
      char one[64];
      std::snprintf(one, sizeof one, "%s%s %.1f", pi ? ", " : "", precisions[pi].c_str(), best_peak[pi]);
      peaks += one;
    }
    std::printf(
        "steps: which statistic of each side's step times (mean: the whole window's steps/s; median: a "
        "typical step; p10: the tenth percentile, the steps this machine's neighbours left alone), taken "
        "per round, then the median over rounds\n"
        "ratio = kiln steps/s ÷ Python steps/s, taken in each round (median and quartiles over the "
        "rounds); floor = the same GEMMs and fused AdamW alone, back to back; ceiling = python ms ÷ floor "
        "ms in each round, the highest ratio a step on these GEMMs can reach; k/floor = kiln ms ÷ floor "
        "ms; GF/s = the step's matrix-product "
        "FLOPs per second; k/peak = kiln's against a %lld³ GEMM of its precision in the same run (best GF/s: %s)%s%s\n",
        static_cast<long long>(peak_size(device)), peaks.c_str(),
        precisions.size() > 1 ? "; A÷B = steps/s in precision A ÷ in B, each side's own, paired per round" : "",
        device.is_cuda() ? "; on CUDA every timed step (kiln's, the twin's, the floor's) ends with a device synchronisation" : "");
    if (const auto path = args["json"].as<std::string>(); !path.empty()) std::ofstream(path) << rows.dump(1) << '\n';
    return 0;
  } catch (const kiln::InputError& e) {
    std::fprintf(stderr, "kiln_bench_train: %s\n", e.what());
    return 2;
  } catch (const cxxopts::exceptions::exception& e) {
    std::fprintf(stderr, "kiln_bench_train: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln_bench_train: %s\n", e.what());
    return 1;
  }
}
