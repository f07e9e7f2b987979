// Memory reporting for a training run: process and heap memory, the bytes held by
// parameters, gradients and optimizer state, a step's peak activation memory, the
// CUDA caching allocator's statistics and snapshots, and the report as a console
// table and a memory.jsonl line.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::train {

// --- the process ---------------------------------------------------------------

struct ProcessMemory {
  int64_t rss_bytes = 0;       // resident now (/proc/self/status VmRSS)
  int64_t peak_rss_bytes = 0;  // the resident high-water mark (VmHWM)
};

/// Reads /proc/self/status. Example: auto m = kiln::train::process_memory();
ProcessMemory process_memory();

/// Bytes the C heap has handed out and not taken back (glibc mallinfo2: arena
/// blocks in use plus mmap'ed blocks; AddressSanitizer's own count in a sanitized
/// build, whose allocator replaces glibc's), across all threads, plus the live blocks
/// of kiln's large-block cache (util/block_cache.h). libtorch's CPU tensors come from
/// these two, so the difference of two readings measures CPU tensors made
/// in between. Example: int64_t before = kiln::train::heap_bytes_in_use();
int64_t heap_bytes_in_use();

// --- what the model and the optimizer hold --------------------------------------

struct ModelMemory {
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t optimizer_state_bytes = 0;
  /// States of an optimizer that does not report its state tensors (one that is not
  /// a kiln::optim::StateReporter, such as libtorch's own): present but not counted
  /// in optimizer_state_bytes.
  int64_t uncounted_optimizer_states = 0;
};

/// Bytes of each distinct storage behind `tensors` (views of one storage count once).
int64_t storage_bytes(const std::vector<at::Tensor>& tensors);

/// Parameters (and their gradients) of every group of `optimizer`, and the tensors
/// of its per-parameter state as the optimizer reports them (kiln::optim::StateReporter,
/// which every kiln optimizer is; Muon's includes its inner AdamW's).
/// Example: auto m = kiln::train::model_memory(optimizer);
ModelMemory model_memory(const torch::optim::Optimizer& optimizer);

// --- one step's activations -----------------------------------------------------

/// Measures the peak activation memory of one training step. Construct it before
/// forward, call forward_done() after the loss, and read bytes() after backward.
/// CPU: heap in use after forward minus before (activations are all alive when
/// forward ends; other threads' allocations in between count too). CUDA: the
/// allocator's peak since construction (it resets the peak) minus what was
/// allocated at construction, which also catches backward's transient buffers
/// ("cuda" without an index means cuda:0). Another device type (a PrivateUse1
/// backend): 0, nothing measured.
/// Example: ActivationProbe probe(device); auto loss = f(x); probe.forward_done(); loss.backward(); probe.bytes();
class ActivationProbe {
 public:
  /// How many probes this process has made (the training loop makes one a measured
  /// step and micro-batch; tests count them).
  static int64_t made();

  explicit ActivationProbe(c10::Device device);
  void forward_done();
  /// Peak bytes above the start; on CPU, forward_done() must have been called.
  int64_t bytes() const;
  /// Bytes held at forward_done() above the start, on CPU and CUDA: what forward keeps
  /// for backward (on CPU the same as bytes()); 0 on another device type.
  int64_t forward_bytes() const;

 private:
  c10::Device device_;
  int64_t start_ = 0;
  std::optional<int64_t> after_forward_;
};

// --- CUDA's caching allocator ---------------------------------------------------

struct CudaMemory {
  int device = 0;
  int64_t allocated_bytes = 0, reserved_bytes = 0;            // now
  // since the last reset_cuda_peak_memory (an ActivationProbe resets it)
  int64_t peak_allocated_bytes = 0, peak_reserved_bytes = 0;
  int64_t alloc_retries = 0;  // cudaMalloc failures that forced a cache flush
  int64_t ooms = 0;
  int64_t total_bytes = 0;    // the device's memory
};

/// The allocator's statistics for `device`; nullopt without CUDA (a CPU-only
/// build or no device). Example: if (auto c = kiln::train::cuda_memory(0)) …
std::optional<CudaMemory> cuda_memory(int device = 0);
/// Restarts the peak_* statistics of `device` (ActivationProbe does it each step).
void reset_cuda_peak_memory(int device = 0);
/// Caps this process at `fraction` of the device's memory (set_per_process_memory_fraction).
void set_cuda_memory_fraction(double fraction, int device = 0);
/// Returns the allocator's cached, unused blocks to the driver.
void empty_cuda_cache();
/// Starts (or stops) recording every allocation with its C++ stack, keeping the
/// last max_entries events, for write_cuda_memory_snapshot.
void record_cuda_memory_history(bool enabled, int64_t max_entries = 100000);
/// Writes the allocator snapshot in the pickled format of PyTorch's memory
/// visualiser (https://pytorch.org/memory_viz; torch.cuda.memory._snapshot()).
void write_cuda_memory_snapshot(const std::string& path);
/// For a CUDA out-of-memory error: writes the snapshot to `snapshot_path` (when
/// not empty) and returns a message naming the batch size, the memory in use and
/// the snapshot. Example: catch (const c10::OutOfMemoryError& e) { throw std::runtime_error(kiln::train::describe_cuda_oom(e, 128, dir + "/oom_snapshot.pickle")); }
std::string describe_cuda_oom(const c10::OutOfMemoryError& error, int64_t batch_size,
                              const std::string& snapshot_path, int device = 0);

// --- the report -----------------------------------------------------------------

struct MemoryReport {
  int64_t step = 0;
  ProcessMemory process;
  int64_t heap_bytes = 0;
  ModelMemory model;
  std::optional<int64_t> activation_peak_bytes;  // of the last measured step
  std::optional<CudaMemory> cuda;

  /// A readable table, one quantity per line, sizes in MiB.
  std::string table() const;
  /// One memory.jsonl object; every size in bytes (docs/training.md lists the fields).
  nlohmann::json json() const;
};

/// Everything above for `optimizer`'s parameters, on `device` (CUDA statistics
/// when it is a CUDA device). Example: auto r = kiln::train::memory_report(step, opt, device, probe.bytes());
MemoryReport memory_report(int64_t step, const torch::optim::Optimizer& optimizer,
                           c10::Device device, std::optional<int64_t> activation_peak_bytes = {});

}  // namespace kiln::train
