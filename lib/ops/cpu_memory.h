// Output buffers of CPU kernels: large ones are backed by transparent huge pages,
// so writing a fresh output costs a fault per 2 MiB instead of one per 4 KiB, and
// are written past the caches when the op's data cannot stay in them.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

#include "kernel_types.h"

namespace kiln::ops {

/// Asks the kernel to back the 2 MiB-aligned part of `t`'s storage with huge pages
/// (madvise MADV_HUGEPAGE) when it is a CPU tensor over 32 MiB (what glibc always
/// serves with a fresh mmap); otherwise does
/// nothing. Call it before the first write. Example: advise_huge_pages(out);
void advise_huge_pages(const at::Tensor& t);

/// The stores for a CPU op that reads and writes `bytes` in all: kStreaming when
/// that is at least the last-level cache (llc_bytes()), where the output would be
/// evicted before the next op reads it anyway, so writing it past the cache saves
/// reading the destination first and keeps the inputs' lines; kCached below, where
/// the next op finds the output in cache. KILN_STREAMING_STORES=off|on|auto (auto,
/// the default) forces either. Example: kernel(…, streaming_stores(3 * x.nbytes()));
Stores streaming_stores(int64_t bytes);

/// The size of the largest CPU cache the first core sees (Linux sysfs; the C
/// library's figure, else 32 MiB, where sysfs has none).
int64_t llc_bytes();

}  // namespace kiln::ops
