// A worker thread assembles a BatchLoader's next batches while the caller trains
// on the current one, in the loader's own order, so prefetching changes no result.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/arg.h>

#include <functional>
#include <memory>
#include <optional>

#include "data/loader.h"

namespace kiln::data {

struct PrefetchOptions {
  /// Batches assembled ahead of the one in use: the queue's bound. 0 assembles each
  /// batch inside next(), on the caller's thread, with no worker.
  TORCH_ARG(int64_t, depth) = 2;
  /// Where batches are delivered; unset: where the data lives (no copy).
  TORCH_ARG(std::optional<c10::Device>, device) = std::nullopt;
  /// The dtype of each batch's x; unset keeps the data's.
  TORCH_ARG(std::optional<c10::ScalarType>, dtype) = std::nullopt;
  /// Host data for a CUDA device: gather into page-locked memory and copy without
  /// blocking, on a stream of the worker's own, which next() makes the caller's wait for.
  TORCH_ARG(bool, pin_memory) = true;
  /// Applied to each batch on the worker after the gather and the dtype conversion,
  /// before the copy to the device. It must draw randomness from its own generator.
  TORCH_ARG(std::function<Batch(Batch)>, transform) = nullptr;
};

/// The batches of `source` (its order: a pure function of seed and epoch) from
/// batch `first_batch` of an epoch to its end; a worker thread gathers, converts and
/// copies up to `depth` of them ahead. The worker gathers where the data lives: on
/// the device when the data is there (as the trainer keeps it), on the CPU otherwise.
/// An exception in the worker is rethrown by the next() that would have returned
/// that batch, as the same object (a kiln::InputError stays one); the batches before
/// it are delivered first.
/// Example: PrefetchLoader batches(loader); batches.start(epoch, 0);
///          for (int64_t i = 0; i < batches.size(); ++i) train_on(batches.next());
class PrefetchLoader {
 public:
  explicit PrefetchLoader(BatchLoader source, PrefetchOptions options = {});
  ~PrefetchLoader();
  PrefetchLoader(const PrefetchLoader&) = delete;
  PrefetchLoader& operator=(const PrefetchLoader&) = delete;

  /// Batches per epoch.
  int64_t size() const { return source_.size(); }
  /// Stops the worker of the previous start, if any, and starts assembling epoch
  /// `epoch` from batch `first_batch` (a resumed run starts mid-epoch).
  void start(int64_t epoch, int64_t first_batch = 0);
  /// The next batch of the epoch; blocks until the worker has it ready. On CUDA the
  /// caller's current stream waits for its copy.
  Batch next();
  /// Ends the worker and drops the batches it assembled; prompt even when the queue
  /// is full (at most one batch in assembly is finished first). Idempotent; the
  /// destructor calls it.
  void stop();

 private:
  struct Item;
  struct Queue;
  Item assemble(int64_t index) const;
  Batch receive(Item item) const;
  void work(Queue& q, int64_t first_batch);

  BatchLoader source_;
  PrefetchOptions options_;
  bool pin_ = false;          // gather into page-locked memory for a non-blocking copy
  bool started_ = false;
  int64_t epoch_ = 0, next_ = 0;  // the epoch and the batch next() returns
  std::unique_ptr<Queue> queue_;  // the worker's: present between start() and stop()
};

}  // namespace kiln::data
