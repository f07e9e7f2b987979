// Output buffers of CPU kernels: large ones are backed by transparent huge pages,
// so writing a fresh output costs a fault per 2 MiB instead of one per 4 KiB, and
// are written past the caches when the op's data cannot stay in them.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string_view>

#include "kernel_types.h"

namespace kiln::ops {

/// Asks the kernel to back the 2 MiB-aligned part of `t`'s storage with huge pages
/// (madvise MADV_HUGEPAGE) when it is a CPU tensor over 32 MiB (what glibc always
/// serves with a fresh mmap); otherwise does
/// nothing. Call it before the first write. Example: advise_huge_pages(out);
void advise_huge_pages(const at::Tensor& t);

/// The stores for a CPU op that reads and writes `bytes` in all: kStreaming when
/// that is at least streaming_threshold_bytes(), where the output would be
/// evicted before the next op reads it anyway, so writing it past the cache saves
/// reading the destination first and keeps the inputs' lines; kCached below, where
/// the next op finds the output in cache. KILN_STREAMING_STORES=off|on|auto (auto,
/// the default) forces either. Example: kernel(…, streaming_stores(3 * x.nbytes()));
Stores streaming_stores(int64_t bytes);

/// The reads for a CPU pass over arrays of `bytes` in all (read and written) on a CPU
/// whose vendor string (cpu_vendor()) is `vendor` and whose cores have `l2` bytes of L2
/// each (l2_bytes(); 0 where unknown): kAhead from kPrefetchThresholdBytes on an Intel
/// CPU with at least kPrefetchL2Bytes of L2, kHardware below it and on every other CPU.
/// The prefetch won 10-17 % on the Intel Xeon model 207 (2 MiB L2) and cost where the
/// L2 is smaller: on the Zen 4 EPYC (1 MiB) the AdamW and Lion loops over 10 M
/// parameters took 6-29 % longer with one thread; on the Intel Xeon model 106 (Ice
/// Lake, 1.25 MiB) AdamW 8-15 % and Lion 4-15 % longer with one thread, and with two
/// AdamW level (median of 7 runs 6.75 against 6.65 ms) and Lion 7 % faster (5.15
/// against 5.51): AdamW, the default, decides (docs/performance.md).
/// Example: prefetch_reads_for("GenuineIntel", 1280 << 10, 1 << 30) is kHardware.
Reads prefetch_reads_for(std::string_view vendor, int64_t l2, int64_t bytes);

/// prefetch_reads_for this CPU. KILN_CPU_PREFETCH=off|on|auto (auto, the default)
/// forces either. Example: kernel(…, prefetch_reads(a.bytes()));
Reads prefetch_reads(int64_t bytes);

/// The bytes a pass moves from which it prefetches in software (prefetch_reads): 48 MiB.
/// On the 2-core Intel Xeon model 207 (2 MiB L2 a core, a 260 MiB L3 shared with other
/// guests) a prefetch 2 KiB ahead in each array made the AdamW and Lion update loops
/// 10-17 % faster from 60 MiB (3 M parameters) to 1.6 GB (100 M), one or two threads,
/// and 2-8 % slower at 20-28 MiB (1 M), whose data the caches serve without it
/// (docs/performance.md).
constexpr int64_t kPrefetchThresholdBytes = int64_t{48} << 20;

/// The L2 a core needs for prefetch_reads to prefetch: 2 MiB, the Xeon model 207's,
/// where it paid; the CPUs with 1-1.25 MiB measured slower with it.
constexpr int64_t kPrefetchL2Bytes = int64_t{2} << 20;

/// The size of the first core's L2 cache (Linux sysfs: the level-2 data or unified
/// cache), 0 where sysfs does not say.
int64_t l2_bytes();

/// The size of the largest CPU cache the first core sees (Linux sysfs; the C
/// library's figure, else 32 MiB, where sysfs has none).
int64_t llc_bytes();

/// The bytes an op moves from which it streams its output (streaming_stores): the
/// last-level cache, and on Intel's CPUs at most 128 MiB. A VM on an Intel server sees
/// the whole server's L3 (260 MiB on the 2-core Xeon guest) and shares it with the
/// other guests. There, at 2^24 floats (relu moving 128 MiB), streaming stores made
/// relu's forward 4.15-4.22 against 5.06-5.33 ms (1 thread) and 1.92-2.06 against
/// 2.44-2.74 ms (2), and a relu whose output a second relu reads (kiln_bench_ops'
/// `relu fwd2`) no slower (12.0-12.2 against 14.0 ms; 5.5-6.0 against 5.5-6.0); at
/// 2^23 that pair was 2-9 % slower streamed, the L3 still holding the output for its
/// reader (docs/performance.md). On the Zen 4 EPYC the threshold is its 32 MiB L3.
/// Example: streaming_threshold_for("GenuineIntel", 260 << 20) is 128 MiB.
int64_t streaming_threshold_for(std::string_view vendor, int64_t llc);
/// streaming_threshold_for this CPU (cpu_vendor(), llc_bytes()), once per process.
int64_t streaming_threshold_bytes();

}  // namespace kiln::ops
