// The memory a computation on the `meta` device would take on a real one: meta
// tensors have sizes and dtypes but no data, so a whole training step runs there in
// milliseconds at any batch size; counting the bytes of the storages it creates and
// frees gives what the step holds and its peak, without allocating any of it.
#pragma once
#include <cstdint>

namespace kiln::train {

/// Counts the bytes of meta storages alive between its construction and its
/// destruction (other threads' meta tensors count too; one probe at a time). The
/// first probe installs a counting allocator for the meta device in place of
/// ATen's (both hand out no memory; this one only keeps the books while a probe
/// lives). Mirrors ActivationProbe: construct before forward, forward_done() after
/// the loss, read after backward.
/// Example: MetaMemoryProbe probe; auto loss = f(x_meta); probe.forward_done(); loss.backward(); probe.peak_bytes();
class MetaMemoryProbe {
 public:
  MetaMemoryProbe();
  ~MetaMemoryProbe();
  MetaMemoryProbe(const MetaMemoryProbe&) = delete;
  MetaMemoryProbe& operator=(const MetaMemoryProbe&) = delete;

  void forward_done();
  /// Bytes alive now above the start.
  int64_t live_bytes() const;
  /// Bytes alive at forward_done() above the start: what forward keeps for backward
  /// (ActivationProbe's figure on the CPU).
  int64_t forward_bytes() const;
  /// The most bytes alive at once since the start, above the start (ActivationProbe's
  /// figure on CUDA: backward's gradients and transient buffers included).
  int64_t peak_bytes() const;

 private:
  int64_t start_ = 0;
  int64_t after_forward_ = -1;
};

}  // namespace kiln::train
