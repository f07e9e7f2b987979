// keep_freed_memory(): two mallopt calls, unless the environment already chose;
// huge_pages_for_large_tensors(): PyTorch's THP_MEM_ALLOC_ENABLE, unless it chose;
// release_free_memory(): malloc_trim and the block cache's idle blocks.
#include "util/heap.h"

#include <c10/core/impl/alloc_cpu.h>
#include <malloc.h>

#include <cstdlib>

namespace kiln::heap {

namespace {

constexpr int kMmapMax = 0;  // no block of its own mmap: every one from the heap
constexpr int kTrimThreshold = 1 << 30;
bool kept = false;  // keep_freed_memory() set them

std::string& state() {
  static std::string s = "heap: glibc's default policy";
  return s;
}

}  // namespace

void keep_freed_memory() {
  if (std::getenv("MALLOC_MMAP_MAX_") || std::getenv("MALLOC_MMAP_THRESHOLD_") ||
      std::getenv("MALLOC_TRIM_THRESHOLD_")) {
    state() = "heap: glibc's policy from MALLOC_MMAP_MAX_ / MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ in the environment";
    return;
  }
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer's allocator replaces glibc's: mallopt has nothing to set.
  state() = "heap: AddressSanitizer's allocator (a sanitized build); glibc's mallopt does not apply";
  return;
#endif
  const bool ok = mallopt(M_MMAP_MAX, kMmapMax) == 1 && mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
  kept = ok;
  state() = ok ? "heap: freed memory kept for reuse (no block on an mmap of its own, trim threshold 1 GiB)"
               : "heap: glibc refused mallopt; its default policy applies";
}

void release_free_memory() {
  release_idle();
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
  malloc_trim(0);
#endif
}

void huge_pages_for_large_tensors() {
#if defined(__linux__)
  setenv("THP_MEM_ALLOC_ENABLE", "1", /*overwrite=*/0);
#endif
}

bool large_tensors_on_huge_pages() {
#if defined(__linux__) && !defined(__ANDROID__)
  // ATen aligns a block it puts on huge pages to the huge page, the others to 64 bytes.
  return c10::c10_compute_alignment(size_t{4} << 20) > 64;
#else
  return false;
#endif
}

std::string policy_environment() {
  // A variable the user set reaches a child by itself; kiln's mallopt calls do not.
  const std::string kept_env = kept ? "MALLOC_MMAP_MAX_=" + std::to_string(kMmapMax) +
                                          " MALLOC_TRIM_THRESHOLD_=" + std::to_string(kTrimThreshold) + " "
                                    : std::string();
  return kept_env + "THP_MEM_ALLOC_ENABLE=" + (large_tensors_on_huge_pages() ? "1" : "0");
}

std::string policy() {
  const char* env = std::getenv("THP_MEM_ALLOC_ENABLE");
  const std::string blocks = large_blocks_cached()
                                 ? "; CPU blocks of 2 MiB or more from kiln's block cache (KILN_CPU_BLOCK_CACHE=off: from the heap)"
                                 : std::string();
  return state() + blocks + (large_tensors_on_huge_pages()
                        ? "; CPU tensors of 2 MiB or more on transparent huge pages (THP_MEM_ALLOC_ENABLE=1)"
                        : std::string("; CPU tensors on the system's default pages (THP_MEM_ALLOC_ENABLE=") +
                              (env ? env : "unset") + ")");
}

}  // namespace kiln::heap
