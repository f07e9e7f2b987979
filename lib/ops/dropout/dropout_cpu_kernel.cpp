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

#include <type_traits>

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

using philox::kBlock;
using philox::kLanes;

// Bit i of the result: element i of block `block` is kept.
#if defined(CPU_CAPABILITY_AVX512)
// 16 lanes of mulhilo(m, a): the low words from one even and one odd 32x32→64
// product each, the high words likewise.
inline void mulhilo(__m512i a, __m512i m, __m512i& lo, __m512i& hi) {
  const __m512i even = _mm512_mul_epu32(a, m);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
  hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

// The Philox state of 16 counters, one a lane.
struct Lanes {
  __m512i c0, c1, c2, c3;
  Lanes() = default;
  explicit Lanes(uint64_t block) {
    const uint64_t base = static_cast<uint64_t>(block) * kLanes;
    c0 = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(base))),
                          _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    c1 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(base >> 32)));
    c2 = _mm512_setzero_si512();
    c3 = _mm512_setzero_si512();
  }
  void round(__m512i m0, __m512i m1, __m512i k0, __m512i k1) {
    __m512i lo0, hi0, lo1, hi1;
    mulhilo(c0, m0, lo0, hi0);
    mulhilo(c2, m1, lo1, hi1);
    // hi1 ^ c1 ^ k0 and hi0 ^ c3 ^ k1 as one three-way XOR each (vpternlogd 0x96).
    c0 = _mm512_ternarylogic_epi32(hi1, c1, k0, 0x96);
    c2 = _mm512_ternarylogic_epi32(hi0, c3, k1, 0x96);
    c1 = lo1;
    c3 = lo0;
  }
  uint64_t below(uint32_t keep_below) const {
    const __m512i b = _mm512_set1_epi32(static_cast<int>(keep_below));
    return static_cast<uint64_t>(_mm512_cmplt_epu32_mask(c0, b)) |
           static_cast<uint64_t>(_mm512_cmplt_epu32_mask(c1, b)) << 16 |
           static_cast<uint64_t>(_mm512_cmplt_epu32_mask(c2, b)) << 32 |
           static_cast<uint64_t>(_mm512_cmplt_epu32_mask(c3, b)) << 48;
  }
};

// The keep bits of kBlocks blocks from `block` on, their rounds interleaved: one block's
// ten rounds are a chain of dependent multiplies, so several side by side keep the
// multiplier busy: two blocks gave 1.2x one block's elements a second (kiln_bench_ops,
// 2^16-2^24 float32 and bfloat16, 2026-12-05); four, no more than two. What remains is
// the vector ALUs' throughput (about 1.8 cycles an element on this Zen 4).
template <int kBlocks>
inline void keep_bits(uint64_t seed, int64_t block, uint32_t keep_below, uint64_t* bits) {
  Lanes s[kBlocks];
  for (int b = 0; b < kBlocks; ++b) s[b] = Lanes(static_cast<uint64_t>(block + b));
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(philox::kM0));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(philox::kM1));
  for (int r = 0; r < philox::kRounds; ++r) {
    const __m512i kv0 = _mm512_set1_epi32(static_cast<int>(k0)), kv1 = _mm512_set1_epi32(static_cast<int>(k1));
    for (int b = 0; b < kBlocks; ++b) s[b].round(m0, m1, kv0, kv1);
    k0 += philox::kW0;
    k1 += philox::kW1;
  }
  for (int b = 0; b < kBlocks; ++b) bits[b] = s[b].below(keep_below);
}
#else
template <int kBlocks>
inline void keep_bits(uint64_t seed, int64_t block, uint32_t keep_below, uint64_t* bits) {
  for (int b = 0; b < kBlocks; ++b) {
    bits[b] = 0;
    const uint64_t base = static_cast<uint64_t>(block + b) * kLanes;
    for (int64_t l = 0; l < kLanes; ++l) {
      const auto w = philox::words(seed, base + static_cast<uint64_t>(l));
      for (int k = 0; k < 4; ++k) bits[b] |= static_cast<uint64_t>(w.v[k] < keep_below) << (k * kLanes + l);
    }
  }
}
#endif

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
