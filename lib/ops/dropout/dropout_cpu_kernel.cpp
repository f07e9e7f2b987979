// Vectorised CPU dropout on raw pointers; compiled once per CPU capability
// (KILN_CPU_NS = base | avx2 | avx512) and chosen at run time. Each block of 64
// elements draws its Philox words for 16 counters at once (AVX-512: one counter a
// lane; the other builds: a loop the compiler vectorises as it can), turns them into
// 64 multipliers (scale or 0) and multiplies. ATen's CPU dropout draws a Bernoulli
// mask one element at a time from mt19937 and multiplies in a second pass.
#include "../cpu_dtype.h"
#include "../cpu_vec.h"
#include "dropout_kernel.h"
#include "philox.h"
#include "philox_cpu.h"

#include <type_traits>

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

using philox::kBlock;
using philox::kLanes;

// mult[i] = scale where bit i is set, else 0.
template <typename A>
void multipliers(uint64_t bits, A scale, A* mult) {
#if defined(CPU_CAPABILITY_AVX512)
  if constexpr (std::is_same_v<A, float>) {
    const __m512 s = _mm512_set1_ps(scale), zero = _mm512_setzero_ps();
    for (int k = 0; k < 4; ++k)
      _mm512_store_ps(mult + 16 * k, _mm512_mask_blend_ps(static_cast<__mmask16>(bits >> (16 * k)), zero, s));
    return;
  } else {
    const __m512d s = _mm512_set1_pd(scale), zero = _mm512_setzero_pd();
    for (int k = 0; k < 8; ++k)
      _mm512_store_pd(mult + 8 * k, _mm512_mask_blend_pd(static_cast<__mmask8>(bits >> (8 * k)), zero, s));
    return;
  }
#endif
  for (int i = 0; i < kBlock; ++i) mult[i] = (bits >> i) & 1 ? scale : A(0);
}

// y[i] = x[i]·mult[i] for the n ≤ 64 elements of a block; whole, aligned blocks may
// go past the caches.
template <typename T>
void apply(const T* x, T* y, const Acc<T>* mult, int64_t n, bool stream) {
  using A = Acc<T>;
  using VA = Vectorized<A>;
  using VT = Vectorized<T>;
  int64_t i = 0;
  const bool whole = n == kBlock && reinterpret_cast<uintptr_t>(y) % sizeof(VT) == 0;
  for (; i + VT::size() <= n; i += VT::size()) {
    VT out;
    if constexpr (std::is_same_v<T, A>) {
      out = VT::loadu(x + i) * VA::loadu(mult + i);
    } else {
      const auto [a0, a1] = at::vec::convert_to_float<T>(VT::loadu(x + i));
      out = at::vec::convert_from_float<T>(a0 * VA::loadu(mult + i), a1 * VA::loadu(mult + i + VA::size()));
    }
    if constexpr (kStreamable<T>) {
      if (stream && whole) {
        store_streaming(out, y + i);
        continue;
      }
    }
    out.store(y + i);
  }
  for (; i < n; ++i) y[i] = static_cast<T>(static_cast<A>(x[i]) * mult[i]);
}

template <typename T>
void run(const T* x, T* y, int64_t first, int64_t n, uint64_t seed, uint32_t keep_below, double scale,
         Stores stores) {
  using A = Acc<T>;
  alignas(64) A mult[kBlock];
  const bool stream = stores == Stores::kStreaming;
  int64_t e = first;
  const int64_t end = first + n;
  constexpr int kPair = 2;
  while (e < end) {
    const int64_t block = e / kBlock;
    const int64_t lo = e - block * kBlock;  // first element of the block taken
    uint64_t bits[kPair];
    if (lo == 0 && end - e >= kPair * kBlock) {  // two whole blocks at once
      keep_bits<kPair>(seed, block, keep_below, bits);
      for (int b = 0; b < kPair; ++b) {
        multipliers(bits[b], static_cast<A>(scale), mult);
        apply(x + (e - first), y + (e - first), mult, kBlock, stream);
        e += kBlock;
      }
      continue;
    }
    const int64_t hi = std::min(kBlock, end - block * kBlock);  // one past the last
    keep_bits<1>(seed, block, keep_below, bits);
    multipliers(bits[0], static_cast<A>(scale), mult);
    apply(x + (e - first), y + (e - first), mult + lo, hi - lo, stream && lo == 0);
    e = block * kBlock + hi;
  }
  if (stream) streaming_fence();
}

}  // namespace

void dropout(DType dtype, const void* x, void* y, int64_t first, int64_t n, uint64_t seed,
             uint32_t keep_below, double scale, Stores stores) {
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    run(static_cast<const T*>(x), static_cast<T*>(y), first, n, seed, keep_below, scale, stores);
  });
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
