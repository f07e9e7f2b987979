// The process's heap policy for training: memory a step frees stays in the heap for
// the next step instead of going back to the kernel, so a step's tensors do not
// fault in (and zero) fresh pages every time, and large tensors sit on huge pages.
#pragma once
#include <string>

#include "util/block_cache.h"

namespace kiln::heap {

/// glibc's malloc serves requests above its mmap threshold (128 KiB at first, raised
/// dynamically to at most 32 MiB) with a fresh mmap, unmapped again on free, and
/// returns the heap's free top to the kernel above its trim threshold. A training
/// step allocates and frees the same tensors every time, so each step faulted in and
/// the kernel zeroed fresh pages for them: measured on the 2-core machine, the
/// ConvNet's bf16 step went from 38–44 ms to 29–31 ms and the GPT's from 148 to 122 ms
/// when glibc kept them, and a relu over 2^24 floats (a 64 MiB output, above any mmap
/// threshold glibc accepts) ran at 0.64 of a copy's bandwidth on fresh pages and 1.0
/// on reused ones (docs/performance.md). Sets that policy with mallopt (kiln's main
/// does, before the first tensor): no block on an mmap of its own (M_MMAP_MAX 0), trim
/// threshold 1 GiB. A user's own MALLOC_MMAP_MAX_, MALLOC_MMAP_THRESHOLD_ or
/// MALLOC_TRIM_THRESHOLD_ (glibc's environment) wins, and nothing is changed then.
/// The cost: the process keeps its peak heap (up to the trim threshold above it)
/// instead of shrinking between steps. A block larger than a worker thread's arena
/// (64 MiB) that such a thread allocates still gets an mmap of its own (glibc's last
/// resort); the main thread's (the ops' outputs) come from the heap.
/// Example: kiln::heap::keep_freed_memory();
void keep_freed_memory();

/// Gives the free memory inside glibc's heap back to the kernel (malloc_trim(0): every
/// whole free page, not only the heap's top). keep_freed_memory() keeps what a step
/// frees for the next step, and with it what setup freed: decoding a data set leaves
/// its temporary buffers in the heap (the default run's resident size was 866 MB with
/// them against 650 MB under glibc's default policy, for 313 MB in use). Also unmaps
/// the large-block cache's idle blocks (release_idle(), util/block_cache.h). The
/// training loop calls this once, before the first step.
/// Example: kiln::heap::release_free_memory();
void release_free_memory();

/// ATen's CPU allocator backs every block of 2 MiB or more with transparent huge pages
/// (aligned to 2 MiB and advised with MADV_HUGEPAGE) when THP_MEM_ALLOC_ENABLE=1,
/// PyTorch's switch, which it reads once, at its first CPU allocation. A large tensor
/// then takes one page fault per 2 MiB instead of per 4 KiB, and fewer TLB misses
/// (docs/performance.md has the figures). Sets THP_MEM_ALLOC_ENABLE=1 for this process
/// (and the processes it starts) unless the environment already holds it:
/// THP_MEM_ALLOC_ENABLE=0 keeps the small pages. Takes effect only before ATen's
/// first CPU allocation: kiln's main calls it first thing. The cost: a block's
/// alignment rounds it up to the next 2 MiB boundary.
/// Example: kiln::heap::huge_pages_for_large_tensors();
void huge_pages_for_large_tensors();

/// Whether ATen's CPU allocator puts large blocks on huge pages in this process.
bool large_tensors_on_huge_pages();

/// keep_freed_memory(), huge_pages_for_large_tensors() and cache_large_blocks()
/// (util/block_cache.h): the policy of kiln's executable, which the benchmarks apply
/// too. Call before the first tensor.
/// Example: kiln::heap::set_training_policy();
inline void set_training_policy() {
  keep_freed_memory();
  huge_pages_for_large_tensors();
  cache_large_blocks();
}

/// The environment that gives another process the same policy (a Python twin in a
/// benchmark), for a shell command's prefix: "MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=…"
/// when keep_freed_memory() set them, and THP_MEM_ALLOC_ENABLE=1 or 0 as ATen has it here.
std::string policy_environment();

/// What keep_freed_memory(), huge_pages_for_large_tensors() and cache_large_blocks() did in this process,
/// for the run's log ("heap: glibc's default policy" when neither was called, as in
/// the tests).
std::string policy();

}  // namespace kiln::heap
