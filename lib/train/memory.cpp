// Process, heap and model memory, the activation probe and the report's two
// formats; the CUDA allocator's side is in memory_cuda.cpp.
#include "train/memory.h"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "optim/state_reporter.h"
#include "util/block_cache.h"

namespace kiln::train {
namespace {

// The value of a "Name:   1234 kB" line of /proc/self/status, in bytes.
std::optional<int64_t> status_kib_field(const std::string& line, const char* name) {
  const std::string prefix = std::string(name) + ":";
  if (line.rfind(prefix, 0) != 0) return std::nullopt;
  return std::stoll(line.substr(prefix.size())) * 1024;
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

ProcessMemory process_memory() {
  std::ifstream in("/proc/self/status");
  TORCH_CHECK(in, "process_memory: cannot read /proc/self/status");
  std::optional<int64_t> rss, peak;
  for (std::string line; std::getline(in, line);) {
    if (auto v = status_kib_field(line, "VmRSS")) rss = v;
    if (auto v = status_kib_field(line, "VmHWM")) peak = v;
  }
  TORCH_CHECK(rss && peak, "process_memory: /proc/self/status has no VmRSS or VmHWM line");
  return {*rss, *peak};
}

#if defined(__SANITIZE_ADDRESS__)
// AddressSanitizer replaces malloc, so glibc's statistics stay empty; its allocator
// counts for itself (sanitizer/allocator_interface.h, which gcc does not install).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#endif

int64_t heap_bytes_in_use() {
#if defined(__SANITIZE_ADDRESS__)
  return static_cast<int64_t>(__sanitizer_get_current_allocated_bytes());
#else
  const struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd) + heap::block_cache_stats().live_bytes;
#endif
}

int64_t storage_bytes(const std::vector<at::Tensor>& tensors) {
  std::unordered_set<const void*> seen;
  int64_t bytes = 0;
  for (const auto& t : tensors) {
    if (!t.defined() || !t.has_storage()) continue;
    const auto* impl = t.storage().unsafeGetStorageImpl();
    if (seen.insert(impl).second) bytes += static_cast<int64_t>(t.storage().nbytes());
  }
  return bytes;
}

ModelMemory model_memory(const torch::optim::Optimizer& optimizer) {
  std::vector<at::Tensor> params, grads, state;
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params()) {
      params.push_back(p);
      if (p.grad().defined()) grads.push_back(p.grad());
    }
  ModelMemory m;
  // The optimizer says which tensors its state holds; the states of one that cannot
  // say go to uncounted_optimizer_states, never silently left out.
  if (const auto* reporter = dynamic_cast<const optim::StateReporter*>(&optimizer)) {
    state = reporter->state_tensors();
  } else {
    for (const auto& [key, s] : optimizer.state())
      if (s) ++m.uncounted_optimizer_states;
  }
  m.parameter_bytes = storage_bytes(params);
  m.gradient_bytes = storage_bytes(grads);
  m.optimizer_state_bytes = storage_bytes(state);
  return m;
}

namespace {
std::atomic<int64_t> probes_made{0};
}  // namespace

int64_t ActivationProbe::made() { return probes_made.load(); }

ActivationProbe::ActivationProbe(c10::Device device) : device_(device) {
  ++probes_made;
  if (device_.is_cuda()) {
    const int index = device_.has_index() ? device_.index() : 0;
    reset_cuda_peak_memory(index);
    const auto c = cuda_memory(index);
    TORCH_CHECK(c, "ActivationProbe: expected a usable CUDA device, got ", device_);
    start_ = c->allocated_bytes;
  } else if (device_.is_cpu()) {
    start_ = heap_bytes_in_use();
  }
  // Another device type (a PrivateUse1 backend) has no allocator kiln can read:
  // bytes() says nothing was measured.
}

void ActivationProbe::forward_done() {
  if (device_.is_cpu()) after_forward_ = heap_bytes_in_use() - start_;
  if (device_.is_cuda()) {
    const auto c = cuda_memory(device_.has_index() ? device_.index() : 0);
    TORCH_CHECK(c, "ActivationProbe: the CUDA device went away");
    after_forward_ = c->allocated_bytes - start_;
  }
}

int64_t ActivationProbe::bytes() const {
  if (device_.is_cuda()) {
    const auto c = cuda_memory(device_.has_index() ? device_.index() : 0);
    TORCH_CHECK(c, "ActivationProbe: the CUDA device went away");
    return std::max<int64_t>(0, c->peak_allocated_bytes - start_);
  }
  if (!device_.is_cpu()) return 0;
  TORCH_CHECK(after_forward_, "ActivationProbe: on CPU, call forward_done() after forward");
  return std::max<int64_t>(0, *after_forward_);
}

int64_t ActivationProbe::forward_bytes() const {
  if (!device_.is_cpu() && !device_.is_cuda()) return 0;
  TORCH_CHECK(after_forward_, "ActivationProbe: call forward_done() after forward");
  return std::max<int64_t>(0, *after_forward_);
}

std::string MemoryReport::table() const {
  std::ostringstream out;
  char line[160];
  const auto row = [&](const char* name, int64_t bytes, const std::string& note = "") {
    std::snprintf(line, sizeof line, "  %-24s %12.1f MiB%s\n", name, mib(bytes), note.c_str());
    out << line;
  };
  out << "memory at step " << step << "\n";
  row("resident (RSS)", process.rss_bytes);
  row("resident peak", process.peak_rss_bytes);
  row("heap in use", heap_bytes);
  row("parameters", model.parameter_bytes);
  row("gradients", model.gradient_bytes);
  row("optimizer state", model.optimizer_state_bytes,
      model.uncounted_optimizer_states
          ? c10::str("  (", model.uncounted_optimizer_states,
                   " states the optimizer does not report: not counted)")
          : "");
  if (activation_peak_bytes) row("activations (step peak)", *activation_peak_bytes);
  if (cuda) {
    row("cuda allocated", cuda->allocated_bytes);
    row("cuda reserved", cuda->reserved_bytes);
    row("cuda peak allocated", cuda->peak_allocated_bytes);
    row("cuda peak reserved", cuda->peak_reserved_bytes);
    row("cuda device total", cuda->total_bytes);
    std::snprintf(line, sizeof line, "  %-24s %12lld\n  %-24s %12lld\n", "cuda alloc retries",
                  static_cast<long long>(cuda->alloc_retries), "cuda OOMs",
                  static_cast<long long>(cuda->ooms));
    out << line;
  }
  return out.str();
}

nlohmann::json MemoryReport::json() const {
  nlohmann::json j = {
      {"step", step},
      {"rss_bytes", process.rss_bytes},
      {"peak_rss_bytes", process.peak_rss_bytes},
      {"heap_bytes", heap_bytes},
      {"parameter_bytes", model.parameter_bytes},
      {"gradient_bytes", model.gradient_bytes},
      {"optimizer_state_bytes", model.optimizer_state_bytes},
      {"uncounted_optimizer_states", model.uncounted_optimizer_states},
      {"activation_peak_bytes",
       activation_peak_bytes ? nlohmann::json(*activation_peak_bytes) : nlohmann::json(nullptr)},
  };
  if (cuda)
    j["cuda"] = {{"device", cuda->device},
                 {"allocated_bytes", cuda->allocated_bytes},
                 {"reserved_bytes", cuda->reserved_bytes},
                 {"peak_allocated_bytes", cuda->peak_allocated_bytes},
                 {"peak_reserved_bytes", cuda->peak_reserved_bytes},
                 {"alloc_retries", cuda->alloc_retries},
                 {"ooms", cuda->ooms},
                 {"total_bytes", cuda->total_bytes}};
  else
    j["cuda"] = nullptr;
  return j;
}

MemoryReport memory_report(int64_t step, const torch::optim::Optimizer& optimizer,
                           c10::Device device, std::optional<int64_t> activation_peak_bytes) {
  MemoryReport r;
  r.step = step;
  r.process = process_memory();
  r.heap_bytes = heap_bytes_in_use();
  r.model = model_memory(optimizer);
  r.activation_peak_bytes = activation_peak_bytes;
  if (device.is_cuda()) r.cuda = cuda_memory(device.has_index() ? device.index() : 0);
  return r;
}

}  // namespace kiln::train
