// The large-block cache behind block_cache.h: a map of idle blocks by size, a table
// of live ones, one mutex; blocks come from mmap and go back with munmap.
#include "util/block_cache.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <limits>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "util/env_switch.h"
#include "util/heap.h"

#if defined(__linux__)
#include <sys/mman.h>
#define KILN_BLOCK_CACHE_MMAP 1
#endif

namespace kiln::heap {

namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kPage = 4096;
constexpr int64_t kMinIdleBound = int64_t{256} << 20;

std::atomic<std::size_t> min_block{kMinBlock};  // cache_blocks_from()

// n (kMinBlock or more; from kProfiledMinBlock in a profiled window) rounded up to an
// eighth of its power of two, a multiple of 256 KiB from 2 MiB: at most 12.5 % more
// than asked, and few enough classes that a step's sizes find their blocks.
std::size_t class_size(std::size_t n) {
  const std::size_t granule = std::bit_floor(n) / 8;
  return (n + granule - 1) / granule * granule;
}

class BlockCache final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t n) override {
    if (n < min_block.load(std::memory_order_relaxed)) return fallback()->allocate(n);
    // Past this, rounding to a class or adding a page would wrap around.
    if (n > std::numeric_limits<std::size_t>::max() / 4) {
      c10::profiledCPUMemoryReporter().OutOfMemory(n);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "kiln's block cache: out of memory: ", n,
                       " bytes asked for a CPU tensor");
    }
    void* p = take(n);
    c10::profiledCPUMemoryReporter().New(p, n);
    return {p, p, &BlockCache::free_block, c10::Device(c10::DeviceType::CPU)};
  }

  // raw_allocate hands out the pointer alone: its free finds out whose block it is.
  c10::DeleterFnPtr raw_deleter() const override {
    return fallback()->raw_deleter() ? &BlockCache::raw_free : nullptr;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  void set_fallback(c10::Allocator* a) { fallback_.store(a); }

  void release_idle() {
    std::vector<Idle> drop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      drop = take_oldest(SIZE_MAX);
    }
    for (const Idle& b : drop) unmap(b.p, b.size);
  }

  BlockCacheStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  static BlockCache& instance() {
    static auto* cache = new BlockCache();  // never destroyed: tensors may outlive main's statics
    return *cache;
  }

 private:
  struct Live {
    std::size_t size;       // the mapping's bytes
    std::size_t requested;  // what the caller asked for
  };
  struct Idle {
    void* p;
    std::size_t size;
  };

  c10::Allocator* fallback() const {
    c10::Allocator* a = fallback_.load();
    return a ? a : c10::GetDefaultCPUAllocator();
  }

  void* take(std::size_t n) {
    const std::size_t want = class_size(n);
    std::vector<Idle> drop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // The class itself, else the smallest idle block up to a quarter larger; the
      // last freed first, its pages the warmest.
      auto it = by_size_.lower_bound(want);
      if (it != by_size_.end() && it->first <= want + want / 4) {
        const uint64_t age = it->second.back();
        it->second.pop_back();
        if (it->second.empty()) by_size_.erase(it);
        const Idle b = by_age_.at(age);
        by_age_.erase(age);
        stats_.idle_bytes -= static_cast<int64_t>(b.size);
        ++stats_.reuses;
        note_live(b.p, b.size, n);
        return b.p;
      }
      // A miss: a new mapping. The idle blocks stay, since a training step needs them
      // again later in the step, unless they and the new block would pass twice the
      // process's peak of live bytes (at least 256 MiB): then the longest idle go
      // first, so sizes a run stopped using cannot pile up.
      const int64_t bound = std::max(kMinIdleBound, 2 * stats_.peak_live_bytes);
      const int64_t over = stats_.idle_bytes + static_cast<int64_t>(want) - bound;
      if (over > 0) drop = take_oldest(static_cast<std::size_t>(over));
    }
    for (const Idle& b : drop) unmap(b.p, b.size);
    void* p = map(want);
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.maps;
    note_live(p, want, n);
    return p;
  }

  // Removes idle blocks, the longest idle first, until `bytes` are gathered or none is
  // left; the caller unmaps them outside the lock. Holds mu_.
  std::vector<Idle> take_oldest(std::size_t bytes) {
    std::vector<Idle> out;
    std::size_t got = 0;
    while (got < bytes && !by_age_.empty()) {
      auto oldest = by_age_.begin();
      const Idle b = oldest->second;
      auto& ages = by_size_.at(b.size);
      ages.erase(std::find(ages.begin(), ages.end(), oldest->first));
      if (ages.empty()) by_size_.erase(b.size);
      by_age_.erase(oldest);
      stats_.idle_bytes -= static_cast<int64_t>(b.size);
      ++stats_.unmaps;
      got += b.size;
      out.push_back(b);
    }
    return out;
  }

  void note_live(void* p, std::size_t size, std::size_t requested) {
    live_.emplace(p, Live{size, requested});
    stats_.live_bytes += static_cast<int64_t>(requested);
    stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, stats_.live_bytes);
  }

  static void free_block(void* p) {
    c10::profiledCPUMemoryReporter().Delete(p);
    const bool mine = instance().give_back(p);
    TORCH_INTERNAL_ASSERT(mine, "kiln's block cache: freeing a block it did not hand out");
  }

  static void raw_free(void* p) {
    auto& cache = instance();
    bool mine = false;
    {
      std::lock_guard<std::mutex> lock(cache.mu_);
      mine = cache.live_.count(p) > 0;
    }
    if (!mine) return cache.fallback()->raw_deleter()(p);  // a small block: the fallback's
    free_block(p);
  }

  // False when p is not a live block of the cache's.
  bool give_back(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return false;
    const std::size_t size = it->second.size;
    stats_.live_bytes -= static_cast<int64_t>(it->second.requested);
    live_.erase(it);
    const uint64_t age = next_age_++;
    by_age_.emplace(age, Idle{p, size});
    by_size_[size].push_back(age);
    stats_.idle_bytes += static_cast<int64_t>(size);
    return true;
  }

  // A block starts at one of 64 cache-line offsets into its first page, in turn. At
  // the same offset (mmap's page boundary), the blocks an elementwise pass or an
  // optimizer step reads and writes together (p, g, m, v) collide in the same cache
  // sets and alias at 4 KiB; glibc's heap spreads them by chance. (With one offset and
  // a 1 MiB threshold, the default MLP's 1.6 MB weights and AdamW states on mappings
  // of their own ran its steps 10–25 % slower; small pages and the shared offset were
  // not told apart, and such blocks now stay with glibc: docs/training.md, "The heap".)
  static std::size_t next_color() {
    static std::atomic<unsigned> turn{0};
    return (turn.fetch_add(1, std::memory_order_relaxed) * 37 % 64) * 64;  // 37: coprime to 64
  }

  // The mapping behind a block: its page, and the pages its bytes reach.
  static uintptr_t mapping_begin(void* p) { return reinterpret_cast<uintptr_t>(p) & ~uintptr_t{kPage - 1}; }
  static std::size_t mapping_length(void* p, std::size_t size) {
    return (reinterpret_cast<uintptr_t>(p) - mapping_begin(p) + size + kPage - 1) & ~(kPage - 1);
  }

  static void* map(std::size_t size) {
#if defined(KILN_BLOCK_CACHE_MMAP)
    const std::size_t color = next_color();
    const std::size_t length = (color + size + kPage - 1) & ~(kPage - 1);
    const bool huge = size >= kHugePage && large_tensors_on_huge_pages();
    const std::size_t extra = huge ? kHugePage : 0;
    void* raw = mmap(nullptr, length + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
      c10::profiledCPUMemoryReporter().OutOfMemory(size);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "kiln's block cache: out of memory: could not map ", size,
                       " bytes (", size >> 20, " MiB) for a CPU tensor");
    }
    auto begin = reinterpret_cast<uintptr_t>(raw);
    if (huge) {  // trim the mapping to a 2 MiB boundary at the front, the rest at the back
      const uintptr_t aligned = (begin + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1);
      if (aligned > begin) munmap(raw, aligned - begin);
      const uintptr_t end = begin + length + extra;
      if (end > aligned + length) munmap(reinterpret_cast<void*>(aligned + length), end - (aligned + length));
      begin = aligned;
#if defined(MADV_HUGEPAGE)
      madvise(reinterpret_cast<void*>(begin), length, MADV_HUGEPAGE);  // advice only: no THP, small pages
#endif
    }
    return reinterpret_cast<void*>(begin + color);
#else
    (void)size;
    TORCH_CHECK(false, "kiln's block cache needs mmap");
#endif
  }

  static void unmap(void* p, std::size_t size) {
#if defined(KILN_BLOCK_CACHE_MMAP)
    munmap(reinterpret_cast<void*>(mapping_begin(p)), mapping_length(p, size));
#else
    (void)p;
    (void)size;
#endif
  }

  std::mutex mu_;
  std::map<std::size_t, std::vector<uint64_t>> by_size_;  // idle blocks' ages by size, the newest last
  std::map<uint64_t, Idle> by_age_;                       // idle blocks, the longest idle first
  uint64_t next_age_ = 0;
  std::unordered_map<void*, Live> live_;
  BlockCacheStats stats_;
  std::atomic<c10::Allocator*> fallback_{nullptr};
};

bool installed = false;

}  // namespace

c10::Allocator* block_cache_allocator() { return &BlockCache::instance(); }

bool cache_large_blocks() {
#if !defined(KILN_BLOCK_CACHE_MMAP) || defined(__SANITIZE_ADDRESS__)
  return false;
#else
  if (installed) return true;
  if (util::env_switch("KILN_CPU_BLOCK_CACHE", {"on", "off"}) == 1) return false;
  auto& cache = BlockCache::instance();
  c10::Allocator* current = c10::GetCPUAllocator();
  if (current != &cache) cache.set_fallback(current);
  c10::SetCPUAllocator(&cache, /*priority=*/1);
  installed = c10::GetCPUAllocator() == &cache;
  return installed;
#endif
}

bool large_blocks_cached() { return installed; }

void release_idle() { BlockCache::instance().release_idle(); }

void cache_blocks_from(std::size_t bytes) { min_block.store(bytes, std::memory_order_relaxed); }

std::size_t cached_blocks_from() { return min_block.load(std::memory_order_relaxed); }

BlockCacheStats block_cache_stats() { return BlockCache::instance().stats(); }

}  // namespace kiln::heap
