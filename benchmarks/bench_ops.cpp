// kiln_bench_ops: times every kiln op against its ATen reference, interleaved
// round by round so both see the same machine state, and prints ref/kiln ratios
// (>1 means kiln is faster). --json FILE writes one object per case.
#define CXXOPTS_VECTOR_DELIMITER ','
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <cxxopts.hpp>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>

#include "cases.h"
#include "ops/cpu_capability.h"

namespace kiln::bench {
std::vector<CaseFactory>& registry() {
  static std::vector<CaseFactory> r;
  return r;
}
}  // namespace kiln::bench

namespace {

using Fn = std::function<void()>;
using kiln::bench::Case;

void sync(const at::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize();
}

// Nanoseconds per call of f: enough calls to fill ~min_ms.
double time_once(const Fn& f, const at::Device& d, int calls) {
  sync(d);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) f();
  sync(d);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
         calls;
}

// Median over `rounds` of (kiln, ref) measured alternately.
std::pair<double, double> measure(const Case& c, const at::Device& d, int rounds, double min_ms) {
  c.kiln(), c.ref();  // warm-up (allocator, caches)
  const double probe = std::max(time_once(c.kiln, d, 1), time_once(c.ref, d, 1));
  const int calls = std::max(1, static_cast<int>(min_ms * 1e6 / std::max(probe, 1.0)));
  std::vector<double> k, r;
  for (int i = 0; i < rounds; ++i) {
    // Alternate which side goes first, so neither always runs on a cache or clock
    // state the other left behind.
    if (i % 2 == 0) {
      k.push_back(time_once(c.kiln, d, calls));
      r.push_back(time_once(c.ref, d, calls));
    } else {
      r.push_back(time_once(c.ref, d, calls));
      k.push_back(time_once(c.kiln, d, calls));
    }
  }
  std::nth_element(k.begin(), k.begin() + k.size() / 2, k.end());
  std::nth_element(r.begin(), r.begin() + r.size() / 2, r.end());
  return {k[k.size() / 2], r[r.size() / 2]};
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("kiln_bench_ops", "kiln ops against their ATen references");
  options.add_options()
      ("json", "write the results to FILE", cxxopts::value<std::string>()->default_value(""))
      ("device", "cpu or cuda", cxxopts::value<std::string>()->default_value("cpu"))
      ("sizes", "log2 of the element counts", cxxopts::value<std::vector<int>>()->default_value("16,20,24"))
      ("threads", "CPU thread counts", cxxopts::value<std::vector<int>>()->default_value("1,2"))
      ("dtypes", "float32, float16, bfloat16, float64",
       cxxopts::value<std::vector<std::string>>()->default_value("float32"))
      ("ops", "only these ops (default: all)", cxxopts::value<std::vector<std::string>>()->default_value(""))
      ("rounds", "interleaved rounds per case (median reported)", cxxopts::value<int>()->default_value("7"))
      ("min-ms", "time per measurement", cxxopts::value<double>()->default_value("20"))
      ("h,help", "show this help");
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::puts(options.help().c_str());
    return 0;
  }
  const at::Device device(args["device"].as<std::string>());
  if (device.is_cuda() && !torch::cuda::is_available()) {
    std::fprintf(stderr, "kiln_bench_ops: --device cuda: no CUDA device is visible\n");
    return 2;
  }
  const std::map<std::string, at::ScalarType> dtypes = {
      {"float32", at::kFloat}, {"float16", at::kHalf}, {"bfloat16", at::kBFloat16}, {"float64", at::kDouble}};
  std::vector<int> threads = args["threads"].as<std::vector<int>>();
  std::vector<std::string> ops = args["ops"].as<std::vector<std::string>>();
  std::erase(ops, std::string());
  if (device.is_cuda()) threads = {at::get_num_threads()};

  std::printf("kiln_bench_ops on %s, CPU capability %s\n", device.str().c_str(),
              kiln::ops::to_string(kiln::ops::cpu_capability()).c_str());
  std::printf("%-12s %-4s %-9s %5s %7s %12s %12s %7s %9s\n", "op", "pass", "dtype", "log2n",
              "threads", "kiln_ns", "ref_ns", "ratio", "bw/copy");
  nlohmann::json out = nlohmann::json::array();
  for (const auto& dname : args["dtypes"].as<std::vector<std::string>>()) {
    if (!dtypes.count(dname)) {
      std::fprintf(stderr, "kiln_bench_ops: --dtypes: unknown dtype '%s'\n", dname.c_str());
      return 2;
    }
    for (const int lg : args["sizes"].as<std::vector<int>>()) {
      const int64_t n = int64_t{1} << lg;
      const auto opts = at::TensorOptions().dtype(dtypes.at(dname)).device(device);
      std::vector<Case> cases;
      for (const auto& factory : kiln::bench::registry())
        for (auto& c : factory(n, opts))
          if (ops.empty() || std::find(ops.begin(), ops.end(), c.op) != ops.end()) cases.push_back(c);
      // On CUDA, a device-to-device copy of the same bytes is the bandwidth yardstick.
      double copy_gbps = 0;
      if (device.is_cuda()) {
        const auto src = at::randn({n}, opts);
        auto dst = at::empty_like(src);
        const Case copy{"copy", "-", [=]() mutable { dst.copy_(src); }, [=]() mutable { dst.copy_(src); }};
        const double ns = measure(copy, device, args["rounds"].as<int>(), args["min-ms"].as<double>()).first;
        copy_gbps = 2.0 * n * src.element_size() / ns;
        std::printf("%-12s %-4s %-9s %5d %7s %12.0f %12s %7s %9s  (%.0f GB/s)\n", "copy", "-",
                    dname.c_str(), lg, "-", ns, "-", "-", "1.00", copy_gbps);
      }
      for (const int t : threads) {
        at::set_num_threads(t);
        for (const auto& c : cases) {
          const auto [k, r] = measure(c, device, args["rounds"].as<int>(), args["min-ms"].as<double>());
          const double fraction = copy_gbps > 0 && c.bytes > 0 ? c.bytes / k / copy_gbps : 0.0;
          char frac[16] = "-";
          if (fraction > 0) std::snprintf(frac, sizeof frac, "%.2f", fraction);
          std::printf("%-12s %-4s %-9s %5d %7d %12.0f %12.0f %7.2f %9s\n", c.op.c_str(), c.pass.c_str(),
                      dname.c_str(), lg, t, k, r, r / k, frac);
          nlohmann::json row = {{"op", c.op}, {"pass", c.pass}, {"device", device.str()},
                                {"dtype", dname}, {"size", n}, {"threads", t}, {"kiln_ns", k},
                                {"ref_ns", r}, {"ratio", r / k}};
          if (fraction > 0) row["bandwidth_fraction"] = fraction, row["copy_gbps"] = copy_gbps;
          out.push_back(row);
        }
      }
    }
  }
  if (const auto path = args["json"].as<std::string>(); !path.empty()) std::ofstream(path) << out.dump(1) << '\n';
  return 0;
}
