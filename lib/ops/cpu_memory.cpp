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

#include "util/heap.h"

#include <cstdint>

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

}  // namespace kiln::ops
