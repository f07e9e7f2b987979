// The process's heap policy for training: memory a step frees stays in the heap for
// the next step instead of going back to the kernel, so a step's tensors do not
// fault in (and zero) fresh pages every time.
#pragma once
#include <string>

namespace kiln::heap {

/// glibc's malloc serves requests above its mmap threshold (128 KiB at first, raised
/// dynamically to at most 32 MiB) with a fresh mmap, unmapped again on free, and
/// returns the heap's free top to the kernel above its trim threshold. A training
/// step allocates and frees the same tensors every time: measured on the 2-core
/// machine, the ConvNet's bf16 step went from 38–44 ms to 29–31 ms and the GPT's
/// from 148 to 122 ms when glibc keeps them (mmap threshold 32 MiB, glibc's maximum;
/// trim threshold 1 GiB) — page faults and page zeroing were a tenth of the step.
/// Sets that policy with mallopt (kiln's main does, before the first tensor); a user's own
/// MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ (glibc's environment) wins, and
/// nothing is changed then. The cost: the process keeps its peak heap (up to the
/// trim threshold above it) instead of shrinking between steps.
/// Example: kiln::heap::keep_freed_memory();
void keep_freed_memory();

/// What keep_freed_memory() did in this process, for the run's log ("heap: glibc's
/// default policy" when it was never called, as in the tests).
const std::string& policy();

}  // namespace kiln::heap
