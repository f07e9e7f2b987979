// BatchLoader: a permutation per epoch from a generator seeded by (seed, epoch).
#include "data/loader.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstring>

namespace kiln::data {
namespace {

// The rows idx of a contiguous CPU tensor into out (contiguous, idx.size(0) rows),
// one memcpy a row. ATen's index_select costs about 30 µs more a call on the Zen 4
// EPYC whatever the rows (32 rows of 784 floats, cold: 62-70 against 29-35 µs; 128
// rows: 101-113 against 97-110), a tenth of a batch-32 step of the default MLP;
// prefetching the next rows, or two threads, gained nothing more (docs/data.md).
// Other layouts and devices take index_select.
at::Tensor gather_rows(const at::Tensor& t, const at::Tensor& idx, at::Tensor out) {
  if (!t.is_cpu() || !t.is_contiguous() || !idx.is_cpu() || idx.scalar_type() != at::kLong ||
      !out.is_contiguous()) {
    return at::index_select_out(out, t, 0, idx);
  }
  const auto ic = idx.contiguous();
  const int64_t n = ic.size(0), rows = t.size(0);
  const size_t row_bytes = static_cast<size_t>(t.numel() / std::max<int64_t>(rows, 1)) * t.element_size();
  const auto* src = static_cast<const char*>(t.const_data_ptr());
  auto* dst = static_cast<char*>(out.data_ptr());
  const int64_t* at_row = ic.const_data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = at_row[i];
    TORCH_CHECK(r >= 0 && r < rows, "BatchLoader: index ", r, " out of 0..", rows - 1);
    std::memcpy(dst + static_cast<size_t>(i) * row_bytes, src + static_cast<size_t>(r) * row_bytes, row_bytes);
  }
  return out;
}

}  // namespace

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
    if (!idx.defined() && !pin_memory) return t.narrow(0, start, len);
    auto sizes = t.sizes().vec();
    sizes[0] = len;
    auto out = at::empty(sizes, t.options().pinned_memory(pin_memory));
    return idx.defined() ? gather_rows(t, idx, std::move(out)) : out.copy_(t.narrow(0, start, len));
  };
  return {take(x_), take(y_), epoch_, index};
}

}  // namespace kiln::data
