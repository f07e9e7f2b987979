// Huge-page advice for large CPU outputs. Under glibc's default policy a fresh
// output of tens of MiB comes from mmap (glibc serves big allocations that way and
// unmaps them on free; kiln's main turns that off, util/heap.h, but a program that
// links libkiln may not), so each call of an op pays one page fault per 4 KiB page it
// writes, and with the system's transparent huge pages set to "madvise" (Debian's
// default) nothing changes that unless the memory is advised. PyTorch has the same
// switch for its whole CPU allocator (THP_MEM_ALLOC_ENABLE=1), which kiln's main
// turns on (util/heap.h); with it off (THP_MEM_ALLOC_ENABLE=0), kiln still applies it
// to the outputs of its own ops.
#include "ops/cpu_memory.h"
#include "ops/cpu_bf16.h"

#include "util/env_switch.h"
#include "util/heap.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace kiln::ops {

void advise_huge_pages(const at::Tensor& t) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  // glibc serves smaller blocks from its heap once its dynamic mmap threshold has
  // risen (at most 32 MiB on 64-bit): those pages are reused, already faulted in,
  // and the system call would be pure cost.
  constexpr size_t kMmapThresholdMax = size_t{32} << 20;
  if (!t.defined() || !t.is_cpu() || t.nbytes() <= kMmapThresholdMax) return;
  // ATen's allocator advised it already (kiln's default: util/heap.h).
  static const bool aten_advises = heap::large_tensors_on_huge_pages();
  if (aten_advises) return;
  const auto begin = reinterpret_cast<uintptr_t>(t.storage().data());
  const uintptr_t end = begin + t.storage().nbytes();
  const uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t last = end & ~(kHuge - 1);
  // Advice only: a kernel without THP says EINVAL and the pages stay small.
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#else
  (void)t;
#endif
}

namespace {

// "32768K" (sysfs's form), "8M" or a plain byte count; 0 for anything else.
int64_t parse_cache_size(const std::string& s) {
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (end == s.c_str() || v <= 0) return 0;
  if (*end == 'K') return v << 10;
  if (*end == 'M') return v << 20;
  return *end == '\0' || *end == '\n' ? v : 0;
}

// One of the first core's caches as sysfs names it (index0, index1, …).
struct CacheEntry {
  int level = 0;     // 0 where sysfs does not say
  std::string type;  // "Data", "Instruction" or "Unified"; empty where sysfs does not say
  int64_t bytes = 0;
};

// The first core's caches, in sysfs's order, up to the first index without a size.
std::vector<CacheEntry> first_core_caches() {
  std::vector<CacheEntry> caches;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream size_file(dir + "size");
    std::string size;
    if (!(size_file >> size)) break;
    CacheEntry c;
    c.bytes = parse_cache_size(size);
    std::ifstream(dir + "level") >> c.level;
    std::ifstream(dir + "type") >> c.type;
    caches.push_back(std::move(c));
  }
  return caches;
}

// The first core's cache of `level` that holds data (type Data or Unified), 0 where
// sysfs names none.
int64_t detect_cache_bytes(int level) {
  for (const auto& c : first_core_caches())
    if (c.level == level && !c.type.empty() && c.type != "Instruction") return c.bytes;
  return 0;
}

int64_t detect_llc_bytes() {
  // sysfs names the cache one core shares; glibc's sysconf sums it over the
  // package on some virtual machines (320 MiB on a 32 MiB EPYC guest).
  int64_t best = 0;
  for (const auto& c : first_core_caches()) best = std::max(best, c.bytes);
#if defined(_SC_LEVEL3_CACHE_SIZE)
  if (best == 0) best = std::max<int64_t>(0, sysconf(_SC_LEVEL3_CACHE_SIZE));
#endif
  return best > 0 ? best : int64_t{32} << 20;
}

// In the order of env_switch's words (KILN_STREAMING_STORES, KILN_CPU_PREFETCH).
enum class StreamingPolicy { kAuto, kOff, kOn };

}  // namespace

int64_t llc_bytes() {
  static const int64_t bytes = detect_llc_bytes();
  return bytes;
}

int64_t l2_bytes() {
  static const int64_t bytes = detect_cache_bytes(2);
  return bytes;
}

int64_t streaming_threshold_for(std::string_view vendor, int64_t llc) {
  constexpr int64_t kIntelCap = int64_t{128} << 20;
  return vendor == "GenuineIntel" ? std::min(llc, kIntelCap) : llc;
}

int64_t streaming_threshold_bytes() {
  static const int64_t bytes = streaming_threshold_for(cpu_vendor(), llc_bytes());
  return bytes;
}

Reads prefetch_reads_for(std::string_view vendor, int64_t l2, int64_t bytes) {
  return vendor == "GenuineIntel" && l2 >= kPrefetchL2Bytes && bytes >= kPrefetchThresholdBytes ? Reads::kAhead
                                                                                                : Reads::kHardware;
}

Reads prefetch_reads(int64_t bytes) {
  static const auto policy =
      static_cast<StreamingPolicy>(util::env_switch("KILN_CPU_PREFETCH", {"auto", "off", "on"}));
  if (policy == StreamingPolicy::kOn) return Reads::kAhead;
  if (policy == StreamingPolicy::kOff) return Reads::kHardware;
  static const std::string vendor = cpu_vendor();
  static const int64_t l2 = l2_bytes();
  return prefetch_reads_for(vendor, l2, bytes);
}

Stores streaming_stores(int64_t bytes) {
  static const auto policy =
      static_cast<StreamingPolicy>(util::env_switch("KILN_STREAMING_STORES", {"auto", "off", "on"}));
  if (policy == StreamingPolicy::kOn) return Stores::kStreaming;
  if (policy == StreamingPolicy::kOff) return Stores::kCached;
  return bytes >= streaming_threshold_bytes() ? Stores::kStreaming : Stores::kCached;
}

}  // namespace kiln::ops
