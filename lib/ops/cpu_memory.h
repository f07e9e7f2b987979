// Output buffers of CPU kernels: large ones are backed by transparent huge pages,
// so writing a fresh output costs a fault per 2 MiB instead of one per 4 KiB.
#pragma once
#include <ATen/core/Tensor.h>

namespace kiln::ops {

/// Asks the kernel to back the 2 MiB-aligned part of `t`'s storage with huge pages
/// (madvise MADV_HUGEPAGE) when it is a CPU tensor over 32 MiB (what glibc always
/// serves with a fresh mmap); otherwise does
/// nothing. Call it before the first write. Example: advise_huge_pages(out);
void advise_huge_pages(const at::Tensor& t);

}  // namespace kiln::ops
