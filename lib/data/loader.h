// Batches of an in-memory data set in a seeded order that depends only on
// (seed, epoch), so a resumed run sees exactly the batches it would have seen.
#pragma once
#include <ATen/core/Tensor.h>

namespace kiln::data {

/// splitmix64: decorrelates seeds that differ in a few bits (consecutive epochs,
/// batches), so each draws an unrelated stream. Example: gen(mix_seed(seed ^ mix_seed(epoch)))
inline uint64_t mix_seed(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

struct Batch {
  at::Tensor x;  // (B, …)
  at::Tensor y;  // (B)
  /// Where the batch stands in the loader's order: a seed for what is drawn per batch
  /// (augmentation), so a resumed run draws the same.
  int64_t epoch = 0, index = 0;
};

/// Example: BatchLoader loader(x, y, 128, /*shuffle=*/true, /*seed=*/0);
///          loader.set_epoch(3); for (int64_t i = 0; i < loader.size(); ++i) use(loader.batch(i));
class BatchLoader {
 public:
  /// draws > 0: each epoch draws that many examples uniformly at random, with
  /// replacement (seeded by (seed, epoch)), instead of a pass over all of them
  /// (shuffled or in order): random windows of a text, whose pool is every start.
  BatchLoader(at::Tensor x, at::Tensor y, int64_t batch_size, bool shuffle, uint64_t seed,
              int64_t draws = 0);
  /// Batches per epoch; the last one may be smaller.
  int64_t size() const;
  /// Examples per epoch (this rank's share when sharded).
  int64_t examples() const;
  /// Data-parallel training: from the next set_epoch on, this process takes every
  /// world-th example of each epoch's order, starting at `rank` (PyTorch's
  /// DistributedSampler), the order padded by its first examples to a multiple of
  /// `world` so that every rank has as many batches. Rank r's batch k and the other
  /// ranks' together are the examples that one process's batch k of world × batch_size
  /// holds. Example: loader.shard(rank, world); loader.set_epoch(0);
  void shard(int64_t rank, int64_t world);
  /// Where the data lives, and so where batch() gathers.
  c10::Device device() const { return x_.device(); }
  /// Draws the order of epoch `epoch` (a pure function of seed and epoch).
  void set_epoch(int64_t epoch);
  /// pin_memory: gathers a CPU data set's batch straight into page-locked host
  /// memory, the buffer a non-blocking copy to CUDA reads (needs a CUDA runtime).
  Batch batch(int64_t index, bool pin_memory = false) const;

 private:
  void shard_order();  // this rank's share of order_, on the data's device

  at::Tensor x_, y_, order_;
  int64_t batch_size_, draws_;
  bool shuffle_;
  uint64_t seed_;
  int64_t epoch_ = 0;
  int64_t rank_ = 0, world_ = 1;
};

}  // namespace kiln::data
