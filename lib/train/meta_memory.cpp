// MetaMemoryProbe: a meta allocator that keeps the books.
#include "train/meta_memory.h"

#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <mutex>

namespace kiln::train {
namespace {

std::atomic<int64_t> live{0}, peak{0};
std::atomic<int> probes{0};

// What a counted meta storage carries in place of data: its size, given back when
// the storage dies.
struct Counted {
  int64_t bytes;
};

void release(void* context) {
  auto* c = static_cast<Counted*>(context);
  live -= c->bytes;
  delete c;
}

void release_nothing(void*) {}

// ATen's meta allocator hands out nullptr for every request; this one does too, and
// while a probe lives it also counts what each storage was given. (A meta storage
// that grows in place — an out= argument resized — changes its size without the
// allocator: such growth is not counted. Training steps create their outputs.)
struct CountingMetaAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t bytes) override {
    const c10::Device meta(c10::DeviceType::Meta);
    if (probes.load() == 0) return {nullptr, nullptr, &release_nothing, meta};
    const int64_t now = live += static_cast<int64_t>(bytes);
    for (int64_t p = peak.load(); now > p && !peak.compare_exchange_weak(p, now);) {
    }
    return {nullptr, new Counted{static_cast<int64_t>(bytes)}, &release, meta};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void*, const void*, std::size_t) const override {}
};

void install_once() {
  static CountingMetaAllocator allocator;
  static std::once_flag installed;
  // Priority 1 outranks ATen's own registration (0).
  std::call_once(installed, [] { c10::SetAllocator(c10::DeviceType::Meta, &allocator, 1); });
}

}  // namespace

MetaMemoryProbe::MetaMemoryProbe() {
  install_once();
  if (probes.fetch_add(1) != 0) {
    probes -= 1;
    TORCH_CHECK(false, "MetaMemoryProbe: another probe is counting already");
  }
  start_ = live.load();
  peak = start_;
}

MetaMemoryProbe::~MetaMemoryProbe() { probes -= 1; }

void MetaMemoryProbe::forward_done() { after_forward_ = live_bytes(); }

int64_t MetaMemoryProbe::live_bytes() const { return live.load() - start_; }

int64_t MetaMemoryProbe::forward_bytes() const {
  TORCH_CHECK(after_forward_ >= 0, "MetaMemoryProbe: call forward_done() after forward");
  return after_forward_;
}

int64_t MetaMemoryProbe::peak_bytes() const { return peak.load() - start_; }

}  // namespace kiln::train
