// kiln's large-block cache (util/block_cache.h): blocks of 2 MiB or more on mappings of
// their own, reused by size class whatever the heap does in between, idle blocks
// bounded by twice the peak of live ones, ATen's tensors and the profiler's memory events once
// it is installed. Each TEST_CASE is a process of its own (ctest), so installing the
// cache as ATen's allocator stays inside the test that does it.
#include <sys/resource.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>
#include <thread>
#include <vector>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include "run_files.h"
#include "support.h"
#include "train/memory.h"
#include "util/block_cache.h"
#include "util/heap.h"

using kiln::heap::block_cache_stats;

namespace {

constexpr size_t kMiB = size_t{1} << 20;

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

void touch(void* p, size_t bytes) {
  auto* c = static_cast<volatile char*>(p);
  for (size_t i = 0; i < bytes; i += 4096) c[i] = 1;
}

// What a profiled window does between steps: a tensor of `sizes` is written and freed,
// 4000 small allocations (the profiler's records) land in the C heap, and the same
// size is made again and written. Where it came back, and the page faults it took.
struct Remade {
  bool same_place = false;
  long faults = 0;
  at::Tensor again;
};
Remade remake_after_small_allocations(at::IntArrayRef sizes) {
  at::Tensor t = at::empty(sizes);
  t.fill_(1.0f);
  void* first = t.data_ptr();
  t.reset();
  std::vector<void*> records;
  for (int i = 0; i < 4000; ++i) records.push_back(std::malloc(200 + i % 700));
  const long faults_before = minor_faults();
  Remade r;
  r.again = at::empty(sizes);
  r.again.fill_(2.0f);
  r.faults = minor_faults() - faults_before;
  r.same_place = r.again.data_ptr() == first;
  for (void* p : records) std::free(p);
  return r;
}

bool cache_usable() {
#if defined(__SANITIZE_ADDRESS__)
  return kiln::test::skip("a sanitized build: the cache stays out of AddressSanitizer's way");
#else
  return true;
#endif
}

}  // namespace

TEST_CASE("the block cache reuses a freed block of the same size class, warm, after small allocations in between",
          "[util][heap][block_cache]") {
  if (!cache_usable()) return;
  auto* cache = kiln::heap::block_cache_allocator();
  kiln::heap::release_idle();
  const auto s0 = block_cache_stats();
  c10::DataPtr a = cache->allocate(8 * kMiB);
  void* first = a.get();
  touch(first, 8 * kMiB);
  auto s = block_cache_stats();
  CHECK(s.maps == s0.maps + 1);
  CHECK(s.live_bytes == s0.live_bytes + static_cast<int64_t>(8 * kMiB));
  // Its mapping starts on a huge page; the block itself at a cache-line offset into it.
  const auto address = reinterpret_cast<uintptr_t>(first);
  CHECK(address % 64 == 0);
  if (kiln::heap::large_tensors_on_huge_pages()) CHECK((address & ~uintptr_t{4095}) % (2 * kMiB) == 0);
  a.clear();
  CHECK(block_cache_stats().idle_bytes == s0.idle_bytes + static_cast<int64_t>(8 * kMiB));

  // What a profiler does between steps: many small records from the C heap. With
  // glibc keeping freed memory (keep_freed_memory), they are carved out of the
  // freed large chunk and the next large block lands on fresh pages.
  std::vector<void*> records;
  for (int i = 0; i < 4000; ++i) records.push_back(std::malloc(200 + i % 700));
  const long faults_before = minor_faults();
  c10::DataPtr b = cache->allocate(8 * kMiB - 100 * 1024);  // the same class
  touch(b.get(), 8 * kMiB - 100 * 1024);
  const long faults = minor_faults() - faults_before;
  CHECK(b.get() == first);
  CHECK(faults < 16);  // its pages are still there: none is faulted in again
  s = block_cache_stats();
  CHECK(s.reuses == s0.reuses + 1);
  CHECK(s.maps == s0.maps + 1);
  for (void* r : records) std::free(r);

  // Under 2 MiB: the allocator installed before it (here ATen's own) serves it.
  c10::DataPtr small = cache->allocate(kiln::heap::kMinBlock - 1);
  REQUIRE(small.get() != nullptr);
  CHECK(block_cache_stats().maps == s.maps);
  CHECK(block_cache_stats().live_bytes == s.live_bytes);
  // A size that cannot be mapped is ATen's out-of-memory error, not a wrapped-around size.
  for (const size_t absurd : {std::numeric_limits<size_t>::max() - 4096, size_t{1} << 50}) {
    INFO(absurd);
    CHECK_THROWS_AS(cache->allocate(absurd), c10::OutOfMemoryError);
  }
  CHECK(block_cache_stats().live_bytes == s.live_bytes);
}

TEST_CASE("the block cache takes a block up to a quarter larger; idle blocks stay until twice the peak is passed",
          "[util][heap][block_cache]") {
  if (!cache_usable()) return;
  auto* cache = kiln::heap::block_cache_allocator();
  kiln::heap::release_idle();
  c10::DataPtr four = cache->allocate(4 * kMiB);
  void* p4 = four.get();
  four.clear();
  const auto s0 = block_cache_stats();
  c10::DataPtr smaller = cache->allocate(3 * kMiB + kMiB / 2);  // 3.5 MiB: 4 is within a quarter
  CHECK(smaller.get() == p4);
  CHECK(block_cache_stats().reuses == s0.reuses + 1);
  smaller.clear();
  // 2 MiB: the idle 4 MiB block is twice it, a miss; the 4 MiB block stays for its size.
  c10::DataPtr two = cache->allocate(2 * kMiB);
  auto s = block_cache_stats();
  CHECK(s.maps == s0.maps + 1);
  CHECK(s.unmaps == s0.unmaps);
  CHECK(s.idle_bytes == static_cast<int64_t>(4 * kMiB));
  two.clear();
  kiln::heap::release_idle();

  // Idle blocks of 100 and 112 MiB (the 100 freed first), a peak of 212 MiB live: a
  // miss of 250 MiB would leave 462 MiB idle and new, over twice the peak (424), so
  // the longest idle, enough to get under it, goes back to the kernel. (Mapped, not
  // touched: no memory is used.)
  c10::DataPtr a = cache->allocate(100 * kMiB);
  c10::DataPtr b = cache->allocate(112 * kMiB);
  const auto s1 = block_cache_stats();
  REQUIRE(s1.peak_live_bytes < static_cast<int64_t>(220 * kMiB));
  a.clear();
  b.clear();
  c10::DataPtr big = cache->allocate(250 * kMiB);
  s = block_cache_stats();
  CHECK(s.unmaps == s1.unmaps + 1);
  CHECK(s.idle_bytes == static_cast<int64_t>(112 * kMiB));
  CHECK(s.maps == s1.maps + 1);
  c10::DataPtr again = cache->allocate(112 * kMiB);
  CHECK(block_cache_stats().reuses == s.reuses + 1);

  big.clear();
  again.clear();
  kiln::heap::release_idle();
  CHECK(block_cache_stats().idle_bytes == 0);
}

TEST_CASE("the block cache starts its blocks at different cache-line offsets into their pages",
          "[util][heap][block_cache]") {
  if (!cache_usable()) return;
  // Blocks that a pass reads and writes together (p, g, m, v) must not all sit at the
  // same offset from a page boundary, where they share cache sets and alias at 4 KiB.
  auto* cache = kiln::heap::block_cache_allocator();
  std::vector<c10::DataPtr> blocks;
  std::set<uintptr_t> offsets;
  for (int i = 0; i < 8; ++i) {
    blocks.push_back(cache->allocate(4 * kMiB));
    const auto address = reinterpret_cast<uintptr_t>(blocks.back().get());
    CHECK(address % 64 == 0);
    offsets.insert(address % 4096);
  }
  CHECK(offsets.size() == 8);
}

TEST_CASE("block sizes round up to an eighth of their power of two", "[util][heap][block_cache]") {
  if (!cache_usable()) return;
  auto* cache = kiln::heap::block_cache_allocator();
  kiln::heap::release_idle();
  // Freed blocks come back as idle bytes of their class's size.
  for (const auto& [asked, cls] : std::vector<std::pair<size_t, size_t>>{
           {2 * kMiB, 2 * kMiB},
           {2 * kMiB + 1, 2 * kMiB + 256 * 1024},
           {5 * kMiB - 3, 5 * kMiB},
           {12 * kMiB, 12 * kMiB},
           {12 * kMiB + 1, 13 * kMiB},
           {100 * kMiB, 104 * kMiB}}) {
    INFO(asked);
    c10::DataPtr p = cache->allocate(asked);
    touch(p.get(), asked);
    p.clear();
    CHECK(block_cache_stats().idle_bytes == static_cast<int64_t>(cls));
    kiln::heap::release_idle();
  }
}

TEST_CASE("installed, the cache serves ATen's large tensors, from any thread, and heap_bytes_in_use counts them",
          "[util][heap][block_cache]") {
  if (!cache_usable()) return;
  const at::Tensor before = at::ones({4 * 1024 * 1024});  // 16 MiB from ATen's own allocator
  ::setenv("KILN_CPU_BLOCK_CACHE", "off", 1);
  CHECK_FALSE(kiln::heap::cache_large_blocks());
  CHECK_FALSE(kiln::heap::large_blocks_cached());
  ::unsetenv("KILN_CPU_BLOCK_CACHE");
  REQUIRE(kiln::heap::cache_large_blocks());
  REQUIRE(kiln::heap::large_blocks_cached());
  CHECK(c10::GetCPUAllocator() == kiln::heap::block_cache_allocator());
  CHECK_THAT(kiln::heap::policy(), Catch::Contains("kiln's block cache"));

  const auto s0 = block_cache_stats();
  const int64_t heap0 = kiln::train::heap_bytes_in_use();
  at::Tensor t = at::empty({4 * 1024 * 1024});
  CHECK(block_cache_stats().live_bytes == s0.live_bytes + static_cast<int64_t>(16 * kMiB));
  CHECK(kiln::train::heap_bytes_in_use() - heap0 >= static_cast<int64_t>(16 * kMiB));
  t.copy_(before);
  CHECK(t.sum().item<double>() == 4.0 * 1024 * 1024);
  // Grown in place: resize_ takes a new block from the cache and frees the old one.
  t.resize_({8 * 1024 * 1024});
  CHECK(block_cache_stats().live_bytes == s0.live_bytes + static_cast<int64_t>(32 * kMiB));
  // Made on one thread, freed on another.
  std::thread([t = std::move(t)]() mutable { t.reset(); }).join();
  CHECK(block_cache_stats().live_bytes == s0.live_bytes);
  // Small tensors and the raw interface still work through it.
  CHECK(at::ones({10}).sum().item<double>() == 10.0);
  if (c10::GetCPUAllocator()->raw_deleter() != nullptr) {
    void* raw = c10::GetCPUAllocator()->raw_allocate(2 * kMiB);
    CHECK(block_cache_stats().live_bytes == s0.live_bytes + static_cast<int64_t>(2 * kMiB));
    c10::GetCPUAllocator()->raw_deallocate(raw);
    void* raw_small = c10::GetCPUAllocator()->raw_allocate(64);
    c10::GetCPUAllocator()->raw_deallocate(raw_small);
    CHECK(block_cache_stats().live_bytes == s0.live_bytes);
  }
}

TEST_CASE("installed, the cache's blocks reach the profiler's memory events", "[util][heap][block_cache][profile]") {
  if (!cache_usable()) return;
  REQUIRE(kiln::heap::cache_large_blocks());
  kiln::test::TempDir dir;
  const std::string run = dir / "run";
  // Batches of 1024 × 784 floats (3.1 MiB) come from the cache.
  REQUIRE(kiln::test::train("configs/tiny.toml", run,
                            {"data.train_limit=4096", "train.batch_size=1024", "train.threads=1",
                             "profile.steps=\"2:3\""}) == 0);
  CHECK(block_cache_stats().maps > 0);
  std::ifstream in(run + "/profile/trace.json");
  const auto trace = nlohmann::json::parse(in);
  int64_t large_allocs = 0, large_frees = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("name", "") != "[memory]" || !e.contains("args")) continue;
    const int64_t bytes = e["args"].value("Bytes", int64_t{0});
    if (bytes >= static_cast<int64_t>(kiln::heap::kMinBlock)) ++large_allocs;
    if (bytes <= -static_cast<int64_t>(kiln::heap::kMinBlock)) ++large_frees;
  }
  CHECK(large_allocs > 0);
  CHECK(large_frees > 0);
}

TEST_CASE("under kiln's training policy a large tensor made again after small allocations gets its warm pages back",
          "[util][heap][block_cache]") {
  if (!cache_usable()) return;
  // What a profiled window does: the profiler's records land in the C heap between a
  // step's large tensors. Under glibc alone (KILN_CPU_BLOCK_CACHE=off) the records
  // split the freed block and the next tensor faults in fresh pages.
  kiln::heap::set_training_policy();
  const auto r = remake_after_small_allocations({2 * 1024 * 1024});  // 8 MiB
  INFO("page faults " << r.faults);
  CHECK(r.same_place);
  CHECK(r.faults < 16);
}

TEST_CASE("with the bound lowered for a profiled window, a 1.6 MB tensor made again after small allocations gets its warm pages back",
          "[util][heap][block_cache][profile]") {
  if (!cache_usable()) return;
  // The default MLP's first-layer weight gradient at batch 32 (512 × 784 floats) is
  // below kMinBlock: glibc's, split by the profiler's records in a profiled window.
  kiln::heap::set_training_policy();
  REQUIRE(kiln::heap::cache_large_blocks());
  REQUIRE(kiln::heap::cached_blocks_from() == kiln::heap::kMinBlock);
  const int64_t live0 = block_cache_stats().live_bytes;
  {
    const at::Tensor outside = at::empty({512, 784});  // the default bound: not the cache's
    CHECK(block_cache_stats().live_bytes == live0);
  }
  kiln::heap::cache_blocks_from(kiln::heap::kProfiledMinBlock);
  auto r = remake_after_small_allocations({512, 784});
  CHECK(block_cache_stats().live_bytes == live0 + 512 * 784 * 4);  // the cache's block
  INFO("page faults " << r.faults);
  CHECK(r.same_place);
  CHECK(r.faults < 16);
  // Back to the default bound, a block the cache made still frees to it.
  kiln::heap::cache_blocks_from(kiln::heap::kMinBlock);
  const at::Tensor small = at::empty({512, 784});
  CHECK(block_cache_stats().live_bytes == live0 + 512 * 784 * 4);
  r.again.reset();
  CHECK(block_cache_stats().live_bytes == live0);
}
