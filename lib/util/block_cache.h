// kiln's CPU allocator for large blocks (2 MiB or more): each on a mapping of its own, kept for reuse
// by size class, so that small allocations (the profiler's records, a logger's strings)
// can never split the place a step's large tensors come back to.
#pragma once
#include <cstddef>
#include <cstdint>

namespace c10 {
struct Allocator;
}

namespace kiln::heap {

/// Why: with glibc keeping freed memory in its heap (keep_freed_memory, util/heap.h),
/// a small request with no small free chunk to take is carved out of the smallest
/// large free chunk. In a profiled window the profiler's records do exactly that
/// between steps, the step's large outputs no longer fit where they were and glibc
/// extends the heap with fresh pages the kernel clears first: measured on the
/// character GPT in float32, 28 steps with 18 profiled made 179k page faults and
/// peaked at 3.1 GB resident, against 97k and 1.1 GB unprofiled, and the profiled
/// steps took +92 % (docs/performance.md). This allocator serves CPU blocks of
/// kMinBlock bytes or more from mappings of their own and keeps freed ones by size
/// class (a size rounded up to an eighth of its power of two), so a step's tensors get
/// back the same, already faulted-in pages whatever else the process allocates.
/// Smaller blocks go to the allocator that was installed before it (ATen's): the
/// blocks from 1 to 2 MiB of the default MLP (its first layer's weight, gradient and
/// AdamW state) ran its steps 10–25 % slower on mappings of their own (small pages,
/// one page offset: docs/training.md). With huge pages on (large_tensors_on_huge_pages()) a block's
/// mapping starts on a 2 MiB boundary and is advised MADV_HUGEPAGE, as ATen's are.
///
/// A request takes an idle block of its class, else one up to a quarter larger, else
/// it maps a new one (a miss). A training step repeats its sizes, so after its first
/// run it misses only after an evaluation of another batch size or at a short last
/// batch. Idle blocks stay mapped for the next use, unless they and a new block
/// would pass twice the process's peak of live bytes (at least 256 MiB): then the
/// longest idle are unmapped first. release_idle() unmaps every idle block
/// (release_free_memory() calls it, before a run's first step).
///
/// Memory events still reach PyTorch's profiler (c10's CPU memory reporter), and
/// heap_bytes_in_use() (train/memory.h) counts the live blocks.
constexpr std::size_t kMinBlock = std::size_t{2} << 20;

/// The smallest block the cache serves while a profiler window records
/// (train/profiler.cpp lowers the bound to it for the window, then restores kMinBlock).
/// Why: the profiler's records split the freed blocks below kMinBlock too. At batch 32
/// the default MLP's first-layer weight gradient (1.6 MB) then faulted in fresh pages
/// every profiled step: its `mm` read 924 µs in the trace against 129–170 µs unprofiled
/// (2026-12-07, docs/performance.md). In the window only: outside it such blocks ran the
/// default run's steps slower on mappings of their own (above).
constexpr std::size_t kProfiledMinBlock = std::size_t{128} << 10;

/// Sets the smallest block the cache serves (kMinBlock by default); smaller ones go to
/// the allocator installed before it. A block frees to whichever allocator made it, so
/// the bound may change at any time. Example: kiln::heap::cache_blocks_from(kProfiledMinBlock);
void cache_blocks_from(std::size_t bytes);

/// The smallest block the cache serves now.
std::size_t cached_blocks_from();

/// Installs the cache as ATen's CPU allocator for this process (priority 1), unless
/// KILN_CPU_BLOCK_CACHE=off, in a build with AddressSanitizer (whose heap checks
/// large blocks too) or on a system without mmap. Safe at any time: a tensor made
/// before it still frees through its own allocator. Returns whether it installed.
/// Example: kiln::heap::cache_large_blocks();
bool cache_large_blocks();

/// Whether cache_large_blocks() installed the cache in this process.
bool large_blocks_cached();

/// Unmaps every idle block; live ones stay. Example: kiln::heap::release_idle();
void release_idle();

struct BlockCacheStats {
  int64_t live_bytes = 0;       // requested bytes of the blocks handed out and not freed
  int64_t peak_live_bytes = 0;  // the most live_bytes has been
  int64_t idle_bytes = 0;       // mapped bytes of the freed blocks kept for reuse
  int64_t maps = 0;             // blocks mapped afresh
  int64_t reuses = 0;           // allocations served from an idle block
  int64_t unmaps = 0;           // blocks given back to the kernel
};

/// The cache's counts so far (all zero before its first large block).
BlockCacheStats block_cache_stats();

/// The cache as an allocator, installed or not (the tests call it directly).
c10::Allocator* block_cache_allocator();

}  // namespace kiln::heap
