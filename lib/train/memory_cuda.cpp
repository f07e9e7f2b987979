// The CUDA caching allocator's side of memory reporting: statistics, the memory
// fraction, emptying the cache, allocation history and the pickled snapshot that
// PyTorch's memory visualiser opens, and the message for an out-of-memory error.
// Without CUDA in the build, statistics are absent and the rest is an error.
#include "train/memory.h"

#include <cstdio>
#include <fstream>

#ifdef KILN_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/cuda/memory_snapshot.h>
#endif

namespace kiln::train {
namespace {

#ifdef KILN_WITH_CUDA
void check_device(int device, const char* where) {
  const int count = c10::cuda::device_count();
  TORCH_CHECK(device >= 0 && device < count, where, ": expected a CUDA device index in [0, ", count,
              "), got ", device);
}
#else
[[noreturn]] void no_cuda(const char* where) {
  TORCH_CHECK(false, where, ": this kiln was built without CUDA");
}
#endif

std::string gib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1LL << 30));
  return text;
}

}  // namespace

#ifdef KILN_WITH_CUDA

std::optional<CudaMemory> cuda_memory(int device) {
  if (device < 0 || device >= c10::cuda::device_count()) return std::nullopt;
  namespace alloc = c10::cuda::CUDACachingAllocator;
  const auto stats = alloc::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  constexpr auto kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  CudaMemory m;
  m.device = device;
  m.allocated_bytes = stats.allocated_bytes[kAll].current;
  m.reserved_bytes = stats.reserved_bytes[kAll].current;
  m.peak_allocated_bytes = stats.allocated_bytes[kAll].peak;
  m.peak_reserved_bytes = stats.reserved_bytes[kAll].peak;
  m.alloc_retries = stats.num_alloc_retries;
  m.ooms = stats.num_ooms;
  m.total_bytes = static_cast<int64_t>(
      at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(device))->totalGlobalMem);
  return m;
}

void reset_cuda_peak_memory(int device) {
  check_device(device, "reset_cuda_peak_memory");
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
}

void set_cuda_memory_fraction(double fraction, int device) {
  TORCH_CHECK(fraction > 0 && fraction <= 1,
              "set_cuda_memory_fraction: expected a fraction in (0, 1], got ", fraction);
  check_device(device, "set_cuda_memory_fraction");
  c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction,
                                                     static_cast<c10::DeviceIndex>(device));
}

void empty_cuda_cache() {
  if (c10::cuda::device_count() > 0) c10::cuda::CUDACachingAllocator::emptyCache();
}

void record_cuda_memory_history(bool enabled, int64_t max_entries) {
  TORCH_CHECK(max_entries > 0, "record_cuda_memory_history: expected max_entries > 0, got ",
              max_entries);
  check_device(0, "record_cuda_memory_history");
  // The string overload, as torch.cuda.memory._record_memory_history(): "all"
  // keeps the state and the event trace, with C++ stacks (there is no Python).
  torch::cuda::_record_memory_history(
      enabled ? std::optional<std::string>("all") : std::nullopt, std::optional<std::string>("all"),
      std::string("all"), static_cast<size_t>(max_entries));
}

void write_cuda_memory_snapshot(const std::string& path) {
  check_device(0, "write_cuda_memory_snapshot");
  const std::string pickled = torch::cuda::_memory_snapshot_pickled();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(pickled.data(), static_cast<std::streamsize>(pickled.size()));
  out.close();
  TORCH_CHECK(out, "write_cuda_memory_snapshot: cannot write ", path);
}

#else

std::optional<CudaMemory> cuda_memory(int) { return std::nullopt; }
void reset_cuda_peak_memory(int) { no_cuda("reset_cuda_peak_memory"); }
void set_cuda_memory_fraction(double, int) { no_cuda("set_cuda_memory_fraction"); }
void empty_cuda_cache() {}
void record_cuda_memory_history(bool, int64_t) { no_cuda("record_cuda_memory_history"); }
void write_cuda_memory_snapshot(const std::string&) { no_cuda("write_cuda_memory_snapshot"); }

#endif

std::string describe_cuda_oom(const c10::OutOfMemoryError& error, int64_t batch_size,
                              const std::string& snapshot_path, int device) {
  std::string message = c10::str("CUDA out of memory at batch size ", batch_size);
  if (const auto m = cuda_memory(device))
    message += c10::str(" on cuda:", device, ": ", gib(m->allocated_bytes), " allocated by tensors, ",
                        gib(m->reserved_bytes), " reserved by the allocator, peak ",
                        gib(m->peak_allocated_bytes), ", of ", gib(m->total_bytes),
                        " on the device");
  if (!snapshot_path.empty()) {
    try {
      write_cuda_memory_snapshot(snapshot_path);
      message += c10::str("; allocator snapshot in ", snapshot_path,
                          " (open it at https://pytorch.org/memory_viz)");
    } catch (const std::exception& e) {
      message += c10::str("; the allocator snapshot could not be written (", e.what(), ")");
    }
  }
  // libtorch's own first line says which allocation failed and how much was free.
  std::string cause = error.what_without_backtrace();
  cause = cause.substr(0, cause.find('\n'));
  return message + ". Try a smaller train.batch_size. (" + cause + ")";
}

}  // namespace kiln::train
