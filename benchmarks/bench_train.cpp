// kiln_bench_train: kiln's training step against its Python twin, side by side.
//
// For each batch size, ROUNDS rounds of: kiln trains the config in this process (the
// library loop `kiln train` runs, with no console) for WARMUP + STEPS steps, timed
// from the step after the warm-up by the loop's own step reports; then the Python
// twin (benchmarks/twins/mlp_twin.py, run by the torch wheel's Python: the same
// libtorch and thread count) runs the same steps; then a GEMM of 2048³ in the run's
// precision measures the machine's peak. The sides alternate so that machine noise
// hits both. Printed per batch size: the median ms/step of each side, their ratio
// (kiln steps/s ÷ Python steps/s, > 1: kiln is faster) with its quartiles over the
// rounds, and each side's reached GFLOP/s against the GEMM peak. Both sides run under
// kiln's heap policy (util/heap.h: freed memory kept, large tensors on huge pages).
//
//   kiln_bench_train [--config configs/fashion_mlp.toml] [--batches 128,32]
//                    [--steps 200] [--warmup 50] [--rounds 3] [--threads 2]
//                    [--precision fp32|bf16] [--compile] [--python PATH] [--json FILE]
//                    [--set section.key=value ...]
//
// The model must be an MLP trained by AdamW (the twin is that model); the steps must
// end before the epoch does (no evaluation inside the timed window).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

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
#include "train/trainer.h"
#include "train_command.h"
#include "util/error.h"
#include "util/heap.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using kiln::bench::quantile;

namespace {

// The time of each step's report: step i's time is the end of step i.
struct StepClock : kiln::train::TrainObserver {
  std::vector<Clock::time_point> at;
  void on_step(const kiln::train::StepReport&) override { at.push_back(Clock::now()); }
};

// FLOPs of one training step of an MLP: forward 2·B·in·out per layer, backward the
// weight gradient (as much again) and the input gradient for every layer but the
// first (whose input needs none). Biases, activations and the loss are left out.
double mlp_step_flops(const kiln::nn::MlpOptions& m, int64_t batch) {
  std::vector<int64_t> widths{m.in_features()};
  widths.insert(widths.end(), m.hidden().begin(), m.hidden().end());
  widths.push_back(m.out_features());
  double flops = 0;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    const double layer = 2.0 * static_cast<double>(batch * widths[i] * widths[i + 1]);
    flops += (i == 0 ? 2.0 : 3.0) * layer;
  }
  return flops;
}

// GFLOP/s of an n×n by n×n matrix product in `dtype` with the current threads: the best
// of a few timed calls after one untimed.
double gemm_peak(at::ScalarType dtype, int64_t n = 2048) {
  const auto a = at::randn({n, n}).to(dtype), b = at::randn({n, n}).to(dtype);
  auto c = at::mm(a, b);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    at::mm_out(c, a, b);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, 2.0 * static_cast<double>(n * n * n) / s / 1e9);
  }
  return best;
}

// kiln's ms per step over the steps after the warm-up, in this process.
double kiln_ms(kiln::train::RunSpec spec, const fs::path& run_dir, int64_t warmup, int64_t steps) {
  spec.run_dir = run_dir.string();
  StepClock clock;
  kiln::train::train(spec, clock);
  fs::remove_all(run_dir);
  if (static_cast<int64_t>(clock.at.size()) != warmup + steps)
    throw std::runtime_error("kiln ran " + std::to_string(clock.at.size()) + " steps, expected " +
                             std::to_string(warmup + steps));
  return std::chrono::duration<double, std::milli>(clock.at.back() - clock.at[warmup - 1]).count() /
         static_cast<double>(steps);
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
      ("precision", "fp32 or bf16 (autocast on both sides)", cxxopts::value<std::string>()->default_value("fp32"))
      ("compile", "also time the twin under torch.compile")
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
    const auto precision = args["precision"].as<std::string>();
    if (steps < 1 || warmup < 1 || rounds < 1 || threads < 1)
      throw kiln::InputError("--steps, --warmup, --rounds and --threads: expected >= 1");
    if (precision != "fp32" && precision != "bf16")
      throw kiln::InputError("--precision: expected fp32 or bf16, found \"" + precision + "\"");
    const std::string python = args["python"].as<std::string>().empty() ? default_python()
                                                                          : args["python"].as<std::string>();
    const std::string twin = KILN_SOURCE_DIR "/benchmarks/twins/mlp_twin.py";
    std::vector<std::string> sets;
    for (const auto& s : args["set"].as<std::vector<std::string>>())
      if (!s.empty()) sets.push_back(s);
    const bool compile = args.count("compile") > 0;

    const fs::path tmp = fs::temp_directory_path() / ("kiln_bench_train." + std::to_string(getpid()));
    nlohmann::json rows = nlohmann::json::array();
    std::printf("kiln_bench_train: %s, %s, %d threads, %lld warm-up + %lld timed steps, %d rounds\n",
                args["config"].as<std::string>().c_str(), precision.c_str(), threads,
                static_cast<long long>(warmup), static_cast<long long>(steps), rounds);
    std::printf("%s; the twin runs with %s\n", kiln::heap::policy().c_str(),
                kiln::heap::policy_environment().c_str());
    std::printf("%6s %11s %11s %7s %11s %11s %11s %9s %9s\n", "batch", "kiln ms", "python ms", "ratio",
                "ratio q1-q3", "kiln GF/s", "py GF/s", "peak GF/s", "kiln/peak");
    for (const int64_t batch : batches) {
      auto overrides = sets;
      for (const auto& o : {"train.batch_size=" + std::to_string(batch),
                            "train.max_steps=" + std::to_string(warmup + steps),
                            "train.threads=" + std::to_string(threads), "train.precision=\"" + precision + "\"",
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
      const std::string command = kiln::heap::policy_environment() + " " + shell_quoted(python) + " " + shell_quoted(twin) + " --batch-size " + std::to_string(batch) +
                                  " --steps " + std::to_string(steps) + " --warmup " + std::to_string(warmup) +
                                  " --threads " + std::to_string(threads) + " --precision " + precision +
                                  " --hidden " + shell_quoted(hidden) + numbers;
      std::vector<double> k, p, pc, ratios, peaks;
      for (int r = 0; r < rounds; ++r) {
        k.push_back(kiln_ms(spec, tmp / ("run" + std::to_string(r)), warmup, steps));
        p.push_back(nlohmann::json::parse(last_line_of(command))["ms_per_step"].get<double>());
        if (compile) pc.push_back(nlohmann::json::parse(last_line_of(command + " --compile"))["ms_per_step"].get<double>());
        at::set_num_threads(threads);
        peaks.push_back(gemm_peak(precision == "bf16" ? at::kBFloat16 : at::kFloat));
        ratios.push_back(p.back() / k.back());
      }
      // The in-features the data gave the model (784 for Fashion-MNIST): the config's
      // model.mlp is completed by the trainer; the twin's first layer is 784 wide.
      auto mlp = spec.model.mlp;
      mlp.in_features(784).out_features(10);
      const double flops = mlp_step_flops(mlp, batch), peak = *std::max_element(peaks.begin(), peaks.end());
      const double km = quantile(k, 0.5), pm = quantile(p, 0.5);
      std::printf("%6lld %11.3f %11.3f %7.2f %5.2f-%5.2f %11.1f %11.1f %9.1f %9.2f\n", static_cast<long long>(batch),
                  km, pm, pm / km, quantile(ratios, 0.25), quantile(ratios, 0.75), flops / km / 1e6,
                  flops / pm / 1e6, peak, flops / km / 1e6 / peak);
      nlohmann::json row = {{"batch", batch}, {"precision", precision}, {"threads", threads},
                            {"kiln_ms", km}, {"python_ms", pm}, {"ratio", pm / km},
                            {"ratio_q1", quantile(ratios, 0.25)}, {"ratio_q3", quantile(ratios, 0.75)},
                            {"step_gflop", flops / 1e9}, {"kiln_gflops", flops / km / 1e6},
                            {"python_gflops", flops / pm / 1e6}, {"gemm_peak_gflops", peak}};
      if (compile) {
        const double cm = quantile(pc, 0.5);
        std::printf("%6s %11s %11.3f %7.2f  (torch.compile twin)\n", "", "", cm, cm / km);
        row["python_compiled_ms"] = cm;
        row["ratio_compiled"] = cm / km;
      }
      rows.push_back(row);
    }
    std::printf("ratio = kiln steps/s ÷ Python steps/s (medians; quartiles of the per-round ratios); GF/s "
                "= the step's matrix-product FLOPs per second; peak = a %s 2048³ GEMM in the same run\n",
                precision.c_str());
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
