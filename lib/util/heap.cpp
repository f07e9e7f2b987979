// keep_freed_memory(): two mallopt calls, unless the environment already chose.
#include "util/heap.h"

#include <malloc.h>

#include <cstdlib>

namespace kiln::heap {

namespace {

std::string& state() {
  static std::string s = "heap: glibc's default policy";
  return s;
}

}  // namespace

void keep_freed_memory() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_")) {
    state() = "heap: glibc's policy from MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ in the environment";
    return;
  }
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer's allocator replaces glibc's: mallopt has nothing to set.
  state() = "heap: AddressSanitizer's allocator (a sanitized build); glibc's mallopt does not apply";
  return;
#endif
  constexpr int kMmapThreshold = 32 << 20;  // glibc's largest (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit)
  constexpr int kTrimThreshold = 1 << 30;
  const bool ok = mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 && mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
  state() = ok ? "heap: freed memory kept for reuse (mmap threshold 32 MiB, trim threshold 1 GiB)"
               : "heap: glibc refused mallopt; its default policy applies";
}

const std::string& policy() { return state(); }

}  // namespace kiln::heap
