// kiln's heap policy (util/heap.h): set by kiln's main with mallopt, unless glibc's
// own environment variables chose one; policy() says which for the run's log.
#include <malloc.h>

#include <cstdlib>

#include "support.h"
#include "util/heap.h"

TEST_CASE("keep_freed_memory sets glibc's thresholds unless the environment chose", "[util][heap]") {
  ::setenv("MALLOC_TRIM_THRESHOLD_", "1000000", 1);
  kiln::heap::keep_freed_memory();
  REQUIRE_THAT(kiln::heap::policy(), Catch::Contains("from MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_"));
  ::unsetenv("MALLOC_TRIM_THRESHOLD_");
  kiln::heap::keep_freed_memory();
#if defined(__SANITIZE_ADDRESS__)
  REQUIRE_THAT(kiln::heap::policy(), Catch::Contains("AddressSanitizer's allocator"));
  return;  // glibc's heap is not the one in use
#endif
  REQUIRE_THAT(kiln::heap::policy(), Catch::Contains("freed memory kept for reuse"));
  // A 30 MiB block (over glibc's initial 128 KiB mmap threshold) now comes from the
  // heap, not from an mmap of its own (mallinfo2's hblkhd counts those).
  const size_t mapped = mallinfo2().hblkhd;
  void* block = std::malloc(30 << 20);
  REQUIRE(block != nullptr);
  CHECK(mallinfo2().hblkhd == mapped);
  std::free(block);
}
