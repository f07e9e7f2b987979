// kiln's heap policy (util/heap.h): set by kiln's main with mallopt, unless glibc's
// own environment variables chose one; policy() says which for the run's log.
#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "support.h"
#include "util/heap.h"

TEST_CASE("keep_freed_memory sets glibc's thresholds unless the environment chose", "[util][heap]") {
  for (const char* name : {"MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_"}) {
    ::setenv(name, "1000000", 1);
    kiln::heap::keep_freed_memory();
    CHECK_THAT(kiln::heap::policy(), Catch::Contains("policy from MALLOC_MMAP_MAX_ / MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_"));
    ::unsetenv(name);
  }
  kiln::heap::keep_freed_memory();
#if defined(__SANITIZE_ADDRESS__)
  REQUIRE_THAT(kiln::heap::policy(), Catch::Contains("AddressSanitizer's allocator"));
  return;  // glibc's heap is not the one in use
#endif
  REQUIRE_THAT(kiln::heap::policy(), Catch::Contains("freed memory kept for reuse"));
  // Blocks of 30 MiB (over glibc's initial 128 KiB mmap threshold) and 96 MiB (over
  // the largest threshold glibc takes, 32 MiB) now come from the heap, not from an
  // mmap of their own (mallinfo2's hblkhd counts those), and a freed one serves the
  // next request of its size.
  for (const size_t bytes : {size_t{30} << 20, size_t{96} << 20}) {
    const size_t mapped = mallinfo2().hblkhd;
    void* block = std::malloc(bytes);
    REQUIRE(block != nullptr);
    CHECK(mallinfo2().hblkhd == mapped);
    std::free(block);
    void* again = std::malloc(bytes);
    CHECK(again == block);
    std::free(again);
  }
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

TEST_CASE("policy_environment gives a child the settings keep_freed_memory made", "[util][heap]") {
  ::unsetenv("MALLOC_MMAP_MAX_");
  ::unsetenv("MALLOC_MMAP_THRESHOLD_");
  ::unsetenv("MALLOC_TRIM_THRESHOLD_");
  kiln::heap::keep_freed_memory();
#if defined(__SANITIZE_ADDRESS__)
  CHECK_THAT(kiln::heap::policy_environment(), !Catch::Contains("MALLOC_"));
#else
  CHECK_THAT(kiln::heap::policy_environment(),
             Catch::StartsWith("MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1073741824 THP_MEM_ALLOC_ENABLE="));
#endif
}

namespace {
// This process's resident bytes (/proc/self/statm's second field, in pages).
long resident_bytes() {
  long size = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &size, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * sysconf(_SC_PAGESIZE);
}
}  // namespace

TEST_CASE("release_free_memory gives the heap's free pages back, not only its top", "[util][heap]") {
#if defined(__SANITIZE_ADDRESS__)
  return (void)kiln::test::skip("a sanitized build: AddressSanitizer's allocator, not glibc's heap");
#endif
  ::unsetenv("MALLOC_MMAP_MAX_");
  ::unsetenv("MALLOC_MMAP_THRESHOLD_");
  ::unsetenv("MALLOC_TRIM_THRESHOLD_");
  kiln::heap::keep_freed_memory();
  // 64 MiB written, then a block above it, so that freeing it leaves a hole in the
  // middle of the heap that glibc's own trimming (of the top) never returns.
  constexpr size_t kBytes = size_t{64} << 20;
  auto* block = static_cast<char*>(std::malloc(kBytes));
  REQUIRE(block != nullptr);
  std::memset(block, 1, kBytes);
  void* above = std::malloc(4096);
  REQUIRE(above != nullptr);
  std::free(block);
  const long kept = resident_bytes();
  kiln::heap::release_free_memory();
  const long released = kept - resident_bytes();
  INFO("resident before " << kept << " bytes, returned " << released);
  CHECK(released > static_cast<long>(kBytes) * 9 / 10);
  std::free(above);
}
