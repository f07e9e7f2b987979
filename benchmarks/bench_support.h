// What every kiln benchmark program shares: a case (a kiln call and its reference),
// interleaved timing of the two, a STREAM-style copy as the bandwidth yardstick (on
// the CPU per thread count, on CUDA device to device), the common command-line
// options, the printed table and the --json rows (op, pass, device, dtype, size,
// threads, kiln_ns, ref_ns, ratio and its quartiles, each side's GB/s and its
// fraction of the copy's).
#pragma once
#define CXXOPTS_VECTOR_DELIMITER ','
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <cxxopts.hpp>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "util/heap.h"

namespace kiln::bench {

struct Case {
  std::string op;    // e.g. "gelu"
  std::string pass;  // "fwd" or "bwd"; "step" for optimizers
  std::function<void()> kiln, ref;
  /// Bytes a call must read and write at the least (0: not a bandwidth-bound op);
  /// the achieved bandwidth is reported against a plain copy's in the same run.
  double bytes = 0;
  /// What `ref` is, when the op has more than one reference (e.g. "torch::optim::AdamW").
  std::string ref_name = {};
  /// The bytes `ref` moves, when not `bytes` (a reference that takes two passes, or
  /// another optimizer's step).
  double ref_bytes = -1;
  double reference_bytes() const { return ref_bytes < 0 ? bytes : ref_bytes; }
};

inline void sync(const at::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize();
}

/// Nanoseconds per call of f over `calls` calls.
inline double time_once(const std::function<void()>& f, const at::Device& d, int calls) {
  sync(d);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) f();
  sync(d);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
         calls;
}

/// One case's result: the median times of each side, ratio = ref_ns / kiln_ns of
/// those medians (> 1: kiln is faster), and the quartiles of the per-round ratios.
/// A round times the two sides back to back, so its ratio sees one machine state;
/// the quartiles say how far the ratio can be trusted on a noisy machine.
struct Timing {
  double kiln_ns = 0, ref_ns = 0;
  double ratio = 0, ratio_q1 = 0, ratio_q3 = 0;
};

/// The q-quantile (0 ≤ q ≤ 1) of v, by the nearest rank.
inline double quantile(std::vector<double> v, double q) {
  const auto i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

/// Times `rounds` rounds of (kiln, ref), each side enough calls to fill about min_ms.
inline Timing measure(const Case& c, const at::Device& d, int rounds, double min_ms) {
  c.kiln(), c.ref();  // warm-up (allocator, caches)
  const double probe = std::max(time_once(c.kiln, d, 1), time_once(c.ref, d, 1));
  const int calls = std::max(1, static_cast<int>(min_ms * 1e6 / std::max(probe, 1.0)));
  std::vector<double> k, r, ratios;
  for (int i = 0; i < std::max(rounds, 1); ++i) {
    // Alternate which side goes first, so neither always runs on a cache or clock
    // state the other left behind.
    if (i % 2 == 0) {
      k.push_back(time_once(c.kiln, d, calls));
      r.push_back(time_once(c.ref, d, calls));
    } else {
      r.push_back(time_once(c.ref, d, calls));
      k.push_back(time_once(c.kiln, d, calls));
    }
    ratios.push_back(r.back() / k.back());
  }
  const double kiln_ns = quantile(k, 0.5), ref_ns = quantile(r, 0.5);
  return {kiln_ns, ref_ns, ref_ns / kiln_ns, quantile(ratios, 0.25), quantile(ratios, 0.75)};
}

/// The bandwidth yardstick: a copy of n elements into another tensor with the
/// current threads, measured in the same run as the cases it judges and counted as
/// STREAM counts its "copy" (bytes read + bytes written, per ns). On the CPU the
/// faster of ATen's copy_ and the C library's memcpy over the threads (glibc's
/// memcpy stores large blocks non-temporally, without reading the destination
/// first, as STREAM's copy built with streaming stores does); on CUDA copy_.
struct Copy {
  double ns = 0, gbps = 0;
  std::string how;  // "at::copy_" or "memcpy"
};
inline Copy copy_bandwidth(int64_t n, const at::TensorOptions& options, int rounds, double min_ms) {
  const auto src = at::randn({n}, options);
  auto dst = at::empty_like(src);
  const std::function<void()> aten = [=]() mutable { dst.copy_(src); };
  std::function<void()> libc = aten;
  if (src.is_cpu())
    libc = [=]() mutable {
      auto* d = static_cast<char*>(dst.data_ptr());
      const auto* s = static_cast<const char*>(src.const_data_ptr());
      at::parallel_for(0, static_cast<int64_t>(src.nbytes()), 1 << 16,
                       [&](int64_t b, int64_t e) { std::memcpy(d + b, s + b, static_cast<size_t>(e - b)); });
    };
  const auto t = measure({"copy", "-", aten, libc}, options.device(), rounds, min_ms);
  const bool libc_faster = src.is_cpu() && t.ref_ns < t.kiln_ns;
  const double ns = libc_faster ? t.ref_ns : t.kiln_ns;
  return {ns, 2.0 * static_cast<double>(src.nbytes()) / ns, libc_faster ? "memcpy" : "at::copy_"};
}

/// The options every benchmark program takes (--json, --device, --threads,
/// --rounds, --min-ms, --help); add the program's own, then parse with parse_common.
inline void add_common_options(cxxopts::Options& options, const std::string& default_rounds,
                               const std::string& default_min_ms) {
  options.add_options()
      ("json", "write the results to FILE", cxxopts::value<std::string>()->default_value(""))
      ("device", "cpu or cuda", cxxopts::value<std::string>()->default_value("cpu"))
      ("threads", "CPU thread counts", cxxopts::value<std::vector<int>>()->default_value("1,2"))
      ("rounds", "interleaved rounds per case (medians and quartiles reported)",
       cxxopts::value<int>()->default_value(default_rounds))
      ("min-ms", "time per measurement", cxxopts::value<double>()->default_value(default_min_ms))
      ("h,help", "show this help");
}

struct Common {
  at::Device device = at::kCPU;
  std::vector<int> threads;  // on CUDA: the one current thread count
  int rounds = 7;
  double min_ms = 20;
  std::string json;
};

/// The common options, checked; nullopt after printing help (exit 0) and throws
/// std::runtime_error with a message for a CUDA device that is not there. Call it
/// before the first tensor: it sets kiln's executable's heap policy (util/heap.h), under
/// which both sides of every case run, and prints it.
inline std::optional<Common> parse_common(const cxxopts::Options& options,
                                          const cxxopts::ParseResult& args) {
  if (args.count("help")) {
    std::puts(options.help().c_str());
    return std::nullopt;
  }
  kiln::heap::set_training_policy();
  std::printf("%s\n", kiln::heap::policy().c_str());
  Common c;
  c.device = at::Device(args["device"].as<std::string>());
  if (c.device.is_cuda() && !torch::cuda::is_available())
    throw std::runtime_error("--device cuda: no CUDA device is visible");
  c.threads = args["threads"].as<std::vector<int>>();
  if (c.device.is_cuda()) c.threads = {at::get_num_threads()};
  c.rounds = args["rounds"].as<int>();
  c.min_ms = args["min-ms"].as<double>();
  c.json = args["json"].as<std::string>();
  return c;
}

/// The printed table: one header, one line per result.
class Table {
 public:
  /// size_label names the size column (e.g. "log2n", "params").
  explicit Table(std::string size_label) : size_label_(std::move(size_label)) {
    std::printf("%-12s %-4s %-20s %-9s %9s %7s %12s %12s %7s %11s %8s %8s %6s %6s\n", "op", "pass",
                "ref", "dtype", size_label_.c_str(), "threads", "kiln_ns", "ref_ns", "ratio",
                "ratio q1-q3", "kiln GB/s", "ref GB/s", "k/copy", "r/copy");
  }
  /// A result row; with copy_gbps (the copy's GB/s at these threads) and the case's
  /// bytes, each side's GB/s and its fraction of the copy's.
  void row(const Case& c, const std::string& dtype, const std::string& size, int threads,
           const Timing& t, double copy_gbps = 0) const {
    char bw[4][16] = {"-", "-", "-", "-"};
    if (copy_gbps > 0 && c.bytes > 0) {
      const double k = c.bytes / t.kiln_ns, r = c.reference_bytes() / t.ref_ns;
      std::snprintf(bw[0], sizeof bw[0], "%.1f", k);
      std::snprintf(bw[1], sizeof bw[1], "%.1f", r);
      std::snprintf(bw[2], sizeof bw[2], "%.2f", k / copy_gbps);
      std::snprintf(bw[3], sizeof bw[3], "%.2f", r / copy_gbps);
    }
    std::printf("%-12s %-4s %-20s %-9s %9s %7d %12.0f %12.0f %7.2f %5.2f-%5.2f %9s %8s %6s %6s\n",
                c.op.c_str(), c.pass.c_str(), c.ref_name.empty() ? "-" : c.ref_name.c_str(), dtype.c_str(),
                size.c_str(), threads, t.kiln_ns, t.ref_ns, t.ratio, t.ratio_q1, t.ratio_q3, bw[0], bw[1],
                bw[2], bw[3]);
  }
  /// The yardstick line of the copy at these threads.
  void copy(const std::string& dtype, const std::string& size, int threads, const Copy& c) const {
    std::printf("%-12s %-4s %-20s %-9s %9s %7d %12.0f %12s %7s %11s %9.1f %8s %6s %6s\n", "copy", "-",
                c.how.c_str(), dtype.c_str(), size.c_str(), threads, c.ns, "-", "-", "-", c.gbps, "-", "1.00", "-");
  }

 private:
  std::string size_label_;
};

/// One --json row: ratio = ref_ns / kiln_ns (> 1: kiln is faster); ratio_q1 and
/// ratio_q3 are the quartiles of the per-round ratios.
inline nlohmann::json json_row(const Case& c, const at::Device& device, const std::string& dtype,
                               int64_t size, int threads, const Timing& t) {
  nlohmann::json row = {{"op", c.op},           {"pass", c.pass},         {"device", device.str()},
                        {"dtype", dtype},       {"size", size},           {"threads", threads},
                        {"kiln_ns", t.kiln_ns}, {"ref_ns", t.ref_ns},     {"ratio", t.ratio},
                        {"ratio_q1", t.ratio_q1}, {"ratio_q3", t.ratio_q3}};
  if (!c.ref_name.empty()) row["ref"] = c.ref_name;
  return row;
}

/// A --json row with the bandwidth columns: each side's GB/s and its fraction of the
/// copy's (copy_gbps, at the same threads), when the case moves a known number of bytes.
inline nlohmann::json json_row(const Case& c, const at::Device& device, const std::string& dtype,
                               int64_t size, int threads, const Timing& t, double copy_gbps) {
  auto row = json_row(c, device, dtype, size, threads, t);
  if (copy_gbps > 0 && c.bytes > 0) {
    const double k = c.bytes / t.kiln_ns, r = c.reference_bytes() / t.ref_ns;
    row["copy_gbps"] = copy_gbps;
    row["kiln_gbps"] = k, row["ref_gbps"] = r;
    row["bandwidth_fraction"] = k / copy_gbps, row["ref_bandwidth_fraction"] = r / copy_gbps;
  }
  return row;
}

inline void write_json(const std::string& path, const nlohmann::json& rows) {
  if (!path.empty()) std::ofstream(path) << rows.dump(1) << '\n';
}

/// The dtype names the benchmarks accept.
inline const std::map<std::string, at::ScalarType>& dtype_names() {
  static const std::map<std::string, at::ScalarType> m = {{"float32", at::kFloat},
                                                          {"float16", at::kHalf},
                                                          {"bfloat16", at::kBFloat16},
                                                          {"float64", at::kDouble}};
  return m;
}

}  // namespace kiln::bench
