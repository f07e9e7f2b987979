// The loop every fused optimizer step's CPU kernel runs (adamw, lion, sgd), built per
// CPU capability: include it from a *_cpu_kernel.cpp only (its templates live in that
// build's KILN_CPU_NS, so an AVX-512 instantiation never stands in for the base one).
#pragma once
#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <tuple>
#include <type_traits>

#include "kernel_types.h"
#include "multi_tensor.h"

#ifndef KILN_CPU_NS
#error "cpu_multi_tensor.h is for *_cpu_kernel.cpp files, compiled once per CPU capability"
#endif

namespace kiln::ops::cpu::KILN_CPU_NS {

/// The vector type a step's arithmetic runs in for element type T: T's own for float
/// and double, float for float16 and bfloat16.
template <typename T>
using OpVec = at::vec::Vectorized<at::opmath_type<T>>;

/// How far ahead of the loop a Reads::kAhead pass prefetches each list: 2 KiB (32 cache
/// lines). On the Intel Xeon model 207, 1 KiB was as fast and 4 KiB 2-3 % slower (the
/// AdamW and Lion loops over 10 M floats).
constexpr int64_t kPrefetchAheadBytes = 2048;

/// Runs math(x) over n elements of kLists lists (data[k]: list k's elements, of type
/// T), x[k] a vector of list k's elements; the lists whose bit is set in kWritten are
/// stored back, the others (the gradient) only read. float and double: native vectors,
/// the tail a partial load and store. float16 and bfloat16: each vector of T is two
/// float vectors, computed in float and rounded once when stored. reads == kAhead: each
/// list is prefetched kPrefetchAheadBytes ahead, up to its end (the last stretch
/// without).
/// Example: update_lists<3, 0b101, float>(span.data, span.n, Reads::kHardware, [&](OpVec<float> (&x)[3]) { … });
template <int kLists, int kWritten, typename T, typename Math>
void update_lists(void* const* data, int64_t n, Reads reads, const Math& math) {
  using V = at::vec::Vectorized<T>;
  T* ptr[kLists];
  for (int k = 0; k < kLists; ++k) ptr[k] = static_cast<T*>(data[k]);
  constexpr int64_t kAhead = kPrefetchAheadBytes / static_cast<int64_t>(sizeof(T));
  // Where the prefetching loop stops: the furthest address it prefetches is element
  // n - V::size(), inside the list.
  const int64_t prefetch_end = reads == Reads::kAhead ? n - kAhead : 0;
  const auto prefetch = [&](int64_t i) {
#pragma GCC unroll 4
    for (int k = 0; k < kLists; ++k) __builtin_prefetch(ptr[k] + i + kAhead, 0, 3);
  };
  if constexpr (std::is_same_v<at::opmath_type<T>, T>) {
    const auto step = [&](int64_t i) {
      V x[kLists];
#pragma GCC unroll 4
      for (int k = 0; k < kLists; ++k) x[k] = V::loadu(ptr[k] + i);
      math(x);
#pragma GCC unroll 4
      for (int k = 0; k < kLists; ++k)
        if ((kWritten >> k) & 1) x[k].store(ptr[k] + i);
    };
    int64_t i = 0;
    for (; i + V::size() <= prefetch_end; i += V::size()) prefetch(i), step(i);
    for (; i + V::size() <= n; i += V::size()) step(i);
    if (i < n) {
      const auto count = static_cast<int>(n - i);
      V x[kLists];
      for (int k = 0; k < kLists; ++k) x[k] = V::loadu(ptr[k] + i, count);
      math(x);
      for (int k = 0; k < kLists; ++k)
        if ((kWritten >> k) & 1) x[k].store(ptr[k] + i, count);
    }
  } else {
    using F = at::vec::Vectorized<float>;
    for (int64_t i = 0; i < n; i += V::size()) {
      if (i + V::size() <= prefetch_end) prefetch(i);
      const auto count = static_cast<int>(std::min<int64_t>(V::size(), n - i));
      F lo[kLists], hi[kLists];
#pragma GCC unroll 4
      for (int k = 0; k < kLists; ++k)
        std::tie(lo[k], hi[k]) = at::vec::convert_to_float<T>(V::loadu(ptr[k] + i, count));
      math(lo);
      math(hi);
#pragma GCC unroll 4
      for (int k = 0; k < kLists; ++k)
        if ((kWritten >> k) & 1) at::vec::convert_from_float<T>(lo[k], hi[k]).store(ptr[k] + i, count);
    }
  }
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
