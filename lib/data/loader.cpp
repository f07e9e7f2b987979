// BatchLoader: a permutation per epoch from a generator seeded by (seed, epoch).
#include "data/loader.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

namespace kiln::data {

BatchLoader::BatchLoader(at::Tensor x, at::Tensor y, int64_t batch_size, bool shuffle,
                         uint64_t seed, int64_t draws)
    : x_(std::move(x)), y_(std::move(y)), batch_size_(batch_size), draws_(draws), shuffle_(shuffle), seed_(seed) {
  TORCH_CHECK(batch_size_ > 0, "BatchLoader: batch_size: expected > 0, got ", batch_size_);
  TORCH_CHECK(draws_ >= 0, "BatchLoader: draws: expected >= 0, got ", draws_);
  TORCH_CHECK(x_.size(0) == y_.size(0), "BatchLoader: x has ", x_.size(0), " examples, y has ",
              y_.size(0));
  TORCH_CHECK(x_.device() == y_.device(), "BatchLoader: x is on ", x_.device(), ", y on ",
              y_.device(), "; expected one device");
  set_epoch(0);
}

int64_t BatchLoader::size() const { return (examples() + batch_size_ - 1) / batch_size_; }

int64_t BatchLoader::examples() const {
  const int64_t all = draws_ > 0 ? draws_ : x_.size(0);
  return (all + world_ - 1) / world_;
}

void BatchLoader::shard(int64_t rank, int64_t world) {
  TORCH_CHECK(world >= 1 && rank >= 0 && rank < world, "BatchLoader: shard: rank ", rank, " of ", world);
  rank_ = rank;
  world_ = world;
  set_epoch(epoch_);
}

void BatchLoader::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  if (!shuffle_ && draws_ == 0 && world_ == 1) {
    order_ = at::Tensor();
    return;
  }
  if (!shuffle_ && draws_ == 0) {  // in order, sharded
    order_ = at::arange(x_.size(0), at::TensorOptions().dtype(at::kLong));
    shard_order();
    return;
  }
  // Drawn by the CPU generator whatever the device, so the order is the same on
  // every device (a run checkpointed on CUDA resumes on the CPU with the same batches).
  auto gen = at::make_generator<at::CPUGeneratorImpl>(mix_seed(seed_ ^ mix_seed(static_cast<uint64_t>(epoch))));
  order_ = draws_ > 0 ? at::randint(x_.size(0), {draws_}, gen, at::TensorOptions().dtype(at::kLong))
                     : at::randperm(x_.size(0), gen, at::TensorOptions().dtype(at::kLong));
  shard_order();
}

void BatchLoader::shard_order() {
  if (world_ > 1) {
    const int64_t all = order_.size(0), total = examples() * world_;
    // Padded with the order's first examples (repeated while the data set is smaller than the world).
    while (order_.size(0) < total)
      order_ = at::cat({order_, order_.narrow(0, 0, std::min(all, total - order_.size(0)))});
    order_ = order_.slice(0, rank_, total, world_).contiguous();
  }
  // The index lives where the data lives: ATen's index_select refuses an index on
  // another device. One copy of the permutation per epoch (8 bytes an example), then
  // every batch is a gather on the device itself. The other design — data on the
  // host, each batch gathered there and copied over (pinned, non-blocking) — moves
  // the whole batch (B·784·4 bytes for Fashion-MNIST, 400 KB at B = 128) across
  // the bus every step instead of 1 KB of indices once; it serves data sets larger
  // than the device (train.data_on_device = false).
  if (order_.device() != x_.device()) order_ = order_.to(x_.device());
}

Batch BatchLoader::batch(int64_t index, bool pin_memory) const {
  TORCH_CHECK(index >= 0 && index < size(), "BatchLoader: batch index ", index, " out of 0..",
              size() - 1);
  TORCH_CHECK(!pin_memory || x_.is_cpu(),
              "BatchLoader: pin_memory: expected the data on the CPU, found ", x_.device());
  const int64_t start = index * batch_size_;
  const int64_t len = std::min(batch_size_, examples() - start);
  const auto idx = order_.defined() ? order_.narrow(0, start, len) : at::Tensor();
  const auto take = [&](const at::Tensor& t) -> at::Tensor {
    if (!pin_memory) return idx.defined() ? t.index_select(0, idx) : t.narrow(0, start, len);
    auto sizes = t.sizes().vec();
    sizes[0] = len;
    auto out = at::empty(sizes, t.options().pinned_memory(true));
    return idx.defined() ? at::index_select_out(out, t, 0, idx)
                         : out.copy_(t.narrow(0, start, len));
  };
  return {take(x_), take(y_), epoch_, index};
}

}  // namespace kiln::data
