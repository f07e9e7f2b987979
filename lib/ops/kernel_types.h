// The element types that kiln's raw-pointer kernels (CPU capability builds and
// CUDA) understand; kept free of torch headers so those files compile fast.
#pragma once
#include <cstdint>

namespace kiln::ops {

enum class DType : int8_t { kFloat, kDouble, kHalf, kBFloat16 };

/// How a CPU kernel writes its output. kCached: ordinary stores, so the next op
/// finds the result in cache. kStreaming: non-temporal stores for an op whose data
/// outgrows the last-level cache (the result would leave it before anyone read it):
/// the destination's lines are not read first and do not evict the inputs'.
/// The Tensor-level code chooses (streaming_stores() in cpu_memory.h).
enum class Stores : int8_t { kCached, kStreaming };

/// How a CPU kernel's loop reads the arrays it streams through. kHardware: the
/// hardware prefetchers alone. kAhead: a software prefetch of every array a fixed
/// distance ahead of the loop too, for a pass whose data come from memory or a far
/// cache (the prefetchers alone kept too few lines in flight for one core). The
/// Tensor-level code chooses (prefetch_reads() in cpu_memory.h).
enum class Reads : int8_t { kHardware, kAhead };

/// Size in bytes of one element. Example: elem_size(DType::kHalf) == 2
constexpr int64_t elem_size(DType t) {
  return t == DType::kDouble ? 8 : t == DType::kFloat ? 4 : 2;
}

}  // namespace kiln::ops
