// StepProfiler over torch/csrc/autograd/profiler_kineto.h — the one file of kiln that
// sees the profiler's C++ API (checked with torch 2.14.1 here and 2.11 on the GPU
// machine): ProfilerConfig(KINETO, shapes, memory, stack), prepareProfiler,
// enableProfiler, disableProfiler, ProfilerResult::events() and save().
#include "train/profiler.h"

#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <kineto/ActivityType.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "util/block_cache.h"
#include "util/error.h"
#include "util/log.h"
#include "util/stderr_to_log.h"

namespace kiln::train {
namespace {

namespace fs = std::filesystem;
namespace prof = torch::autograd::profiler;
using Clock = std::chrono::steady_clock;

std::string format_shapes(const prof::KinetoEvent& e) {
  if (!e.hasShapes()) return "";
  std::ostringstream s;
  s << '[';
  bool first = true;
  for (const auto& shape : e.shapes()) {
    s << (first ? "" : ", ") << '[';
    for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
    s << ']';
    first = false;
  }
  s << ']';
  return s.str();
}

struct Interval {
  uint64_t start, end;
  size_t event;  // index into events, or SIZE_MAX for a memory event
  int64_t bytes;
};

bool is_host_op(uint8_t type) {
  return type == static_cast<uint8_t>(libkineto::ActivityType::CPU_OP) ||
         type == static_cast<uint8_t>(libkineto::ActivityType::USER_ANNOTATION);
}

bool is_device_work(const prof::KinetoEvent& e) {
  const auto t = e.activityType();
  return e.deviceType() != c10::DeviceType::CPU &&
         (t == static_cast<uint8_t>(libkineto::ActivityType::CONCURRENT_KERNEL) ||
          t == static_cast<uint8_t>(libkineto::ActivityType::GPU_MEMCPY) ||
          t == static_cast<uint8_t>(libkineto::ActivityType::GPU_MEMSET));
}

// The tables: host operators' self time (their duration less that of the operators
// and scopes nested in them on the same thread) and self memory (the [memory] events
// that fall inside them and no deeper), device kernels' time by name.
void tabulate(const std::vector<prof::KinetoEvent>& events, ProfileReport& report,
              std::map<std::string, int64_t>& phases) {
  std::map<uint64_t, std::vector<Interval>> threads;
  std::map<std::pair<std::string, std::string>, OpStats> ops;
  std::map<std::string, OpStats> kernels;
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    if (e.name() == "[memory]") {
      threads[e.startThreadId()].push_back({e.startNs(), e.startNs(), SIZE_MAX, e.nBytes()});
    } else if (is_device_work(e)) {
      auto& k = kernels[e.name()];
      k.name = e.name();
      ++k.calls;
      k.self_ns += static_cast<int64_t>(e.durationNs());
      k.total_ns += static_cast<int64_t>(e.durationNs());
    } else if (is_host_op(e.activityType())) {
      threads[e.startThreadId()].push_back({e.startNs(), e.endNs(), i, 0});
    }
  }
  std::vector<int64_t> child_ns(events.size(), 0), self_alloc(events.size(), 0),
      self_net(events.size(), 0), total_alloc(events.size(), 0);
  int64_t unattributed = 0;
  for (auto& [thread, list] : threads) {
    // Outer intervals first at one start; a memory event after the ops starting with it.
    std::sort(list.begin(), list.end(), [](const Interval& a, const Interval& b) {
      if (a.start != b.start) return a.start < b.start;
      const bool am = a.event == SIZE_MAX, bm = b.event == SIZE_MAX;
      if (am != bm) return bm;
      return a.end > b.end;
    });
    std::vector<const Interval*> open;
    for (const auto& iv : list) {
      const bool memory = iv.event == SIZE_MAX;
      while (!open.empty() && (memory ? open.back()->end < iv.start : open.back()->end <= iv.start))
        open.pop_back();
      if (memory) {
        if (open.empty()) {
          unattributed += iv.bytes > 0 ? iv.bytes : 0;
          continue;
        }
        if (iv.bytes > 0) {
          self_alloc[open.back()->event] += iv.bytes;
          for (const auto* o : open) total_alloc[o->event] += iv.bytes;
        }
        self_net[open.back()->event] += iv.bytes;
        continue;
      }
      if (!open.empty()) child_ns[open.back()->event] += static_cast<int64_t>(iv.end - iv.start);
      open.push_back(&iv);
    }
  }
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    if (e.name() == "[memory]" || is_device_work(e) || !is_host_op(e.activityType())) continue;
    const auto dur = static_cast<int64_t>(e.durationNs());
    if (e.activityType() == static_cast<uint8_t>(libkineto::ActivityType::USER_ANNOTATION)) {
      phases[e.name()] += dur;
      continue;
    }
    auto shapes = format_shapes(e);
    auto& s = ops[{e.name(), shapes}];
    s.name = e.name();
    s.shapes = std::move(shapes);
    ++s.calls;
    s.self_ns += std::max<int64_t>(0, dur - child_ns[i]);
    s.total_ns += dur;
    s.self_alloc_bytes += self_alloc[i];
    s.self_net_bytes += self_net[i];
    s.total_alloc_bytes += total_alloc[i];
  }
  for (auto& [key, s] : ops) report.cpu.push_back(s);
  report.memory = report.cpu;
  std::sort(report.cpu.begin(), report.cpu.end(),
            [](const OpStats& a, const OpStats& b) { return a.self_ns > b.self_ns; });
  std::sort(report.memory.begin(), report.memory.end(),
            [](const OpStats& a, const OpStats& b) { return a.self_alloc_bytes > b.self_alloc_bytes; });
  report.memory.erase(std::remove_if(report.memory.begin(), report.memory.end(),
                                     [](const OpStats& s) { return s.self_alloc_bytes == 0; }),
                      report.memory.end());
  for (auto& [name, k] : kernels) report.device.push_back(k);
  std::sort(report.device.begin(), report.device.end(),
            [](const OpStats& a, const OpStats& b) { return a.self_ns > b.self_ns; });
  if (unattributed > 0)
    log::debug("profiler: " + std::to_string(unattributed) +
               " bytes allocated outside any recorded operator (other threads, the loop)");
}

std::string ms(int64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", static_cast<double>(ns) / 1e6);
  return b;
}

std::string mib(int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", static_cast<double>(bytes) / (1 << 20));
  return b;
}

std::string pad(std::string s, size_t width, bool right = false) {
  if (s.size() > width) s = s.substr(0, width - 3) + "...";
  const std::string fill(width - s.size(), ' ');
  return right ? fill + s : s + fill;
}

// One table: name, the chosen columns, calls, shapes.
std::string table(const std::string& title, const std::vector<OpStats>& rows, int64_t top,
                  int64_t total_ns, bool memory) {
  std::ostringstream out;
  out << title << '\n';
  if (rows.empty()) {
    out << "  (none recorded)\n\n";
    return out.str();
  }
  const std::string head =
      memory ? pad("Name", 36) + pad("Self alloc MiB", 16, true) + pad("Self net MiB", 14, true) +
                   pad("Total alloc MiB", 17, true) + pad("Calls", 8, true) + "  Input shapes"
             : pad("Name", 36) + pad("Self %", 8, true) + pad("Self ms", 12, true) +
                   pad("Total ms", 12, true) + pad("Avg us", 10, true) + pad("Calls", 8, true) +
                   "  Input shapes";
  out << head << '\n' << std::string(head.size() + 20, '-') << '\n';
  for (int64_t i = 0; i < std::min<int64_t>(top, static_cast<int64_t>(rows.size())); ++i) {
    const auto& r = rows[i];
    char pct[16], avg[32];
    std::snprintf(pct, sizeof pct, "%.1f%%", total_ns > 0 ? 100.0 * r.self_ns / total_ns : 0.0);
    std::snprintf(avg, sizeof avg, "%.1f", r.calls ? r.self_ns / 1e3 / r.calls : 0.0);
    if (memory)
      out << pad(r.name, 36) << pad(mib(r.self_alloc_bytes), 16, true)
          << pad(mib(r.self_net_bytes), 14, true) << pad(mib(r.total_alloc_bytes), 17, true)
          << pad(std::to_string(r.calls), 8, true) << "  "
          << r.shapes << '\n';
    else
      out << pad(r.name, 36) << pad(pct, 8, true) << pad(ms(r.self_ns), 12, true)
          << pad(ms(r.total_ns), 12, true) << pad(avg, 10, true) << pad(std::to_string(r.calls), 8, true)
          << "  " << r.shapes << '\n';
  }
  if (static_cast<int64_t>(rows.size()) > top)
    out << "  … " << rows.size() - top << " more rows (profile.top)\n";
  out << '\n';
  return out.str();
}

std::string phase_text(const std::map<std::string, int64_t>& phases, int64_t steps) {
  if (phases.empty()) return "";
  std::ostringstream out;
  out << "Loop phases (user scopes), ms per step:";
  for (const char* name : {"data", "forward", "backward", "clip", "optimizer", "evaluate", "checkpoint"})
    if (const auto it = phases.find(name); it != phases.end())
      out << "  " << name << ' ' << ms(it->second / std::max<int64_t>(steps, 1));
  out << "\n\n";
  return out.str();
}

}  // namespace

ProfileOptions parse_profile_steps(const std::string& text, const std::string& key) {
  ProfileOptions o;
  if (text.empty()) return o;
  auto number = [&](const std::string& part) -> int64_t {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (part.empty() || used != part.size() || v < 1 || !std::isdigit(static_cast<unsigned char>(part[0])))
      throw InputError(key + ": expected steps \"A:B\" (1 <= A <= B, 1-based step numbers) or \"A\", found \"" +
                       text + "\"");
    return v;
  };
  const auto colon = text.find(':');
  o.first(number(text.substr(0, colon)));
  o.last(colon == std::string::npos ? o.first() : number(text.substr(colon + 1)));
  if (o.last() < o.first())
    throw InputError(key + ": expected steps \"A:B\" with A <= B, found \"" + text + "\"");
  return o;
}

StepProfiler::StepProfiler(ProfileOptions options, std::string dir, c10::Device device)
    : options_(std::move(options)), dir_(std::move(dir)), device_(device) {}

StepProfiler::~StepProfiler() {
  if (!recording_) return;
  try {  // a run that threw inside the window: turn the profiler off, write nothing
    prof::disableProfiler();
  } catch (...) {
  }
  heap::cache_blocks_from(heap::kMinBlock);
  quiet_.reset();
}

void StepProfiler::begin_step(int64_t step) {
  step_start_ = Clock::now();
  if (recording_ || options_.first() == 0 || step < options_.first() || step > options_.last() ||
      started_at_ > 0)
    return;
  std::set<torch::profiler::impl::ActivityType> activities{torch::profiler::impl::ActivityType::CPU};
  if (device_.is_cuda()) activities.insert(torch::profiler::impl::ActivityType::CUDA);
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO,
                                                     options_.shapes(), options_.memory(),
                                                     options_.stack());
  // Kineto writes to stderr on its own (on a machine without a GPU: "gpuGetDeviceCount
  // failed with code 35"), and so does c10's log for a tensor made before the window
  // and freed in it ("Memory block of unknown size…"): into train.log while it records.
  quiet_ = std::make_shared<StderrToLog>("profiler window, stderr: ");
  try {
    prof::prepareProfiler(config, activities);
    prof::enableProfiler(config, activities);
  } catch (const c10::Error& e) {  // e.g. a libtorch built without Kineto
    quiet_.reset();
    const std::string message = std::string("profile.steps: the profiler did not start (") +
                                e.what_without_backtrace() + "); the run goes on unprofiled";
    log::warn(message);  // in train.log, and on kiln train's console (app/console.h)
    started_at_ = -1;
    return;
  }
  // The profiler's records would split the step's freed blocks below kMinBlock too,
  // and its outputs would fault in fresh pages each profiled step: from kiln's block
  // cache while the window records, where that cache is installed (util/block_cache.h).
  heap::cache_blocks_from(heap::kProfiledMinBlock);
  recording_ = true;
  started_at_ = step;
  window_start_ = step_start_ = Clock::now();
  log::info("profiler: recording from step " + std::to_string(step));
}

std::optional<ProfileReport> StepProfiler::end_step(int64_t step) {
  if (!recording_) {
    if (started_at_ == 0 && step > 1)  // step 1 warms up: not a fair baseline
      unprofiled_ms_.push_back(std::chrono::duration<double, std::milli>(Clock::now() - step_start_).count());
    return std::nullopt;
  }
  if (step < options_.last()) return std::nullopt;
  return stop(step);
}

std::optional<ProfileReport> StepProfiler::finish(int64_t step) {
  if (!recording_) return std::nullopt;
  return stop(step);
}

std::optional<ProfileReport> StepProfiler::stop(int64_t last_step) {
  const double window_ms = std::chrono::duration<double, std::milli>(Clock::now() - window_start_).count();
  const auto result = prof::disableProfiler();
  heap::cache_blocks_from(heap::kMinBlock);
  recording_ = false;
  ProfileReport r;
  r.first = started_at_;
  r.last = last_step;
  const int64_t steps = last_step - started_at_ + 1;
  if (steps > 0) r.profiled_ms_per_step = window_ms / static_cast<double>(steps);
  if (!unprofiled_ms_.empty()) {
    auto v = unprofiled_ms_;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    r.unprofiled_ms_per_step = v[v.size() / 2];
  }
  std::error_code ec;
  // Only the directory itself: its parent is the run directory, which is not made
  // again when it was deleted under the run (the trainer rescues the run instead).
  fs::create_directory(dir_, ec);
  if (ec) throw InputError(dir_ + ": cannot create the profile directory: " + ec.message());
  r.trace_path = (fs::path(dir_) / "trace.json").string();
  r.table_path = (fs::path(dir_) / "top_ops.txt").string();
  {
    // Written beside and renamed, so a trace from an earlier window stays whole until replaced.
    const auto partial = (fs::path(dir_) / "trace.partial.json").string();
    result->save(partial);
    fs::rename(partial, r.trace_path, ec);
    if (ec) throw InputError(r.trace_path + ": cannot write the trace: " + ec.message());
  }
  quiet_.reset();  // the window's stderr into train.log
  std::map<std::string, int64_t> phases;
  tabulate(result->events(), r, phases);
  std::ostringstream head;
  head << "kiln profile: steps " << r.first << ".." << r.last << " on " << device_ << ", trace "
       << r.trace_path << "\n";
  if (steps > 0) {
    char line[200];
    if (r.unprofiled_ms_per_step)
      std::snprintf(line, sizeof line,
                    "profiled steps took %.2f ms each; unprofiled steps before them %.2f ms "
                    "(median), a profiler overhead of %+.0f%%\n",
                    r.profiled_ms_per_step, *r.unprofiled_ms_per_step,
                    100.0 * (r.profiled_ms_per_step / *r.unprofiled_ms_per_step - 1.0));
    else
      std::snprintf(line, sizeof line,
                    "profiled steps took %.2f ms each (no unprofiled step before them to compare with)\n",
                    r.profiled_ms_per_step);
    head << line;
  }
  head << '\n' << phase_text(phases, std::max<int64_t>(steps, 1));
  r.text = head.str() + format_top_ops(r, options_.top());
  std::ofstream out(r.table_path, std::ios::trunc);
  out << r.text;
  if (!out) throw InputError(r.table_path + ": cannot write");
  log::info("profiler: steps " + std::to_string(r.first) + ".." + std::to_string(r.last) + " written to " +
            r.trace_path + " and " + r.table_path);
  return r;
}

std::string format_top_ops(const ProfileReport& r, int64_t top) {
  int64_t cpu_total = 0, device_total = 0;
  for (const auto& s : r.cpu) cpu_total += s.self_ns;
  for (const auto& s : r.device) device_total += s.self_ns;
  std::string out = table("Top operators by self CPU time", r.cpu, top, cpu_total, false);
  if (!r.device.empty()) out += table("Top GPU kernels by device time", r.device, top, device_total, false);
  out += table("Top operators by self allocated memory", r.memory, top, 0, true);
  return out;
}

PhaseScope::PhaseScope(bool on, std::string name) {
  if (!on) return;
  name_ = std::move(name);
  scope_ = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
  if (scope_->isActive()) scope_->before(name_.c_str(), c10::ArrayRef<const c10::IValue>{});
}

PhaseScope::~PhaseScope() = default;

}  // namespace kiln::train
