// kiln's heap policy (util/heap.h): set by kiln's main with mallopt, unless glibc's
// own environment variables chose one; policy() says which for the run's log.
#include <malloc.h>

#include <cstdlib>
#include <string>

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

TEST_CASE("huge_pages_for_large_tensors sets PyTorch's switch unless the environment chose", "[util][heap]") {
  const char* before = std::getenv("THP_MEM_ALLOC_ENABLE");
  const std::string saved = before ? before : "";
  ::setenv("THP_MEM_ALLOC_ENABLE", "0", 1);
  kiln::heap::huge_pages_for_large_tensors();
  CHECK(std::string(std::getenv("THP_MEM_ALLOC_ENABLE")) == "0");  // the user's choice stays
  ::unsetenv("THP_MEM_ALLOC_ENABLE");
  kiln::heap::huge_pages_for_large_tensors();
  REQUIRE(std::getenv("THP_MEM_ALLOC_ENABLE") != nullptr);
  CHECK(std::string(std::getenv("THP_MEM_ALLOC_ENABLE")) == "1");
  // ATen read the switch at this process's first allocation, before the test ran
  // (the kiln executable sets it first thing; tests/app/cli_test.sh checks its log):
  // policy() and policy_environment() report what ATen does, not the variable.
  const bool on = kiln::heap::large_tensors_on_huge_pages();
  CHECK_THAT(kiln::heap::policy(), Catch::Contains(on ? "on transparent huge pages" : "default pages"));
  CHECK_THAT(kiln::heap::policy_environment(),
             Catch::EndsWith(on ? "THP_MEM_ALLOC_ENABLE=1" : "THP_MEM_ALLOC_ENABLE=0"));
  if (before) ::setenv("THP_MEM_ALLOC_ENABLE", saved.c_str(), 1); else ::unsetenv("THP_MEM_ALLOC_ENABLE");
}

TEST_CASE("policy_environment gives a child the thresholds keep_freed_memory set", "[util][heap]") {
  ::unsetenv("MALLOC_MMAP_THRESHOLD_");
  ::unsetenv("MALLOC_TRIM_THRESHOLD_");
  kiln::heap::keep_freed_memory();
#if defined(__SANITIZE_ADDRESS__)
  CHECK_THAT(kiln::heap::policy_environment(), !Catch::Contains("MALLOC_"));
#else
  CHECK_THAT(kiln::heap::policy_environment(),
             Catch::StartsWith("MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824 THP_MEM_ALLOC_ENABLE="));
#endif
}
