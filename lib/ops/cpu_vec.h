// at::vec helpers the vectorised CPU kernels (*_cpu_kernel.cpp) share: loading
// half types as float vectors, and streamed() for the bandwidth-bound loops.
// Include only from those files: it lives in the per-capability namespace
// KILN_CPU_NS, so each build gets its own copy.
#pragma once
#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "cpu_capability.h"

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

using at::vec::Vectorized;
template <typename T> using Acc = at::opmath_type<T>;  // float for half types

// One vector of Acc<T> from V::size() elements at p (or the first n, n < V::size()).
template <typename T>
Vectorized<Acc<T>> load_acc(const T* p) {
  if constexpr (std::is_same_v<T, Acc<T>>) {
    return Vectorized<T>::loadu(p);
  } else {
    Vectorized<float> v;
    at::vec::load_to_float(p, v);
    return v;
  }
}
template <typename T>
Vectorized<Acc<T>> load_acc(const T* p, int64_t n) {
  if constexpr (std::is_same_v<T, Acc<T>>) {
    return Vectorized<T>::loadu(p, n);
  } else {
    return std::get<0>(at::vec::convert_to_float<T>(Vectorized<T>::loadu(p, n)));
  }
}

/// Runs body(begin, end) over [0, n) in blocks of 1 KiB of T and, when the
/// arrays outgrow this core's L2, prefetches each block's lines 4 KiB ahead: the
/// inputs for reading, the output for writing (PREFETCHW in the AVX-512 build, so
/// a store finds its line owned instead of waiting for the read-for-ownership).
/// Why ours: ATen's loops (at::vec::map, TensorIterator) leave a stream to the
/// hardware prefetchers; on the Xeon we measure (2 MiB L2) this made relu on 2^20
/// floats 2.4 % faster with one thread and changed nothing measurable with two
/// (docs/ops.md). Within L2 the prefetches are pure cost (0.6× at 2^16), hence
/// the gate. Example:
///   streamed(n, y, {x}, [&](int64_t b, int64_t e) { at::vec::map(f, y + b, x + b, e - b); });
template <typename T, typename Body>
void streamed(int64_t n, T* out, std::initializer_list<const T*> in, Body&& body) {
  constexpr int64_t kBlock = 1024 / sizeof(T), kLine = 64 / sizeof(T), kAhead = 4096 / sizeof(T);
  const auto bytes = static_cast<long>(n * sizeof(T) * (in.size() + 1));
  if (bytes <= l2_cache_bytes()) {
    body(int64_t{0}, n);
    return;
  }
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t end = std::min(i + kBlock, n);
    // Never past n: a write prefetch there would take lines from the next
    // thread's chunk.
    const int64_t last = std::min(end + kAhead, n);
    for (int64_t p = i + kAhead; p < last; p += kLine) {
      __builtin_prefetch(out + p, 1, 3);
      for (const T* a : in) __builtin_prefetch(a + p, 0, 3);
    }
    body(i, end);
  }
}

}  // namespace
}  // namespace kiln::ops::cpu::KILN_CPU_NS
