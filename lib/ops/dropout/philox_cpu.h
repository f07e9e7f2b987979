// The CPU side of philox.h's layout, shared by the vectorised kernels that drop
// elements (dropout_cpu_kernel.cpp; the fused attention's weights): the keep bits of
// whole blocks of 64 elements, and a run of float multipliers for any range. Include
// only from *_cpu_kernel.cpp files: it lives in the per-capability namespace
// KILN_CPU_NS, so each build gets its own copy.
#pragma once
#include <algorithm>
#include <cstdint>

#include "philox.h"

#if defined(CPU_CAPABILITY_AVX512)
#include <immintrin.h>
#endif

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

// Bit i of bits[b]: element i of block `block + b` is kept.

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
    const uint64_t base = static_cast<uint64_t>(block) * philox::kLanes;
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
// the vector ALUs' throughput (about 1.8 cycles an element on the 2-core Intel Xeon of that day).
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
    const uint64_t base = static_cast<uint64_t>(block + b) * philox::kLanes;
    for (int64_t l = 0; l < philox::kLanes; ++l) {
      const auto w = philox::words(seed, base + static_cast<uint64_t>(l));
      for (int k = 0; k < 4; ++k) bits[b] |= static_cast<uint64_t>(w.v[k] < keep_below) << (k * philox::kLanes + l);
    }
  }
}
#endif

// mult[k] = scale where element first + k is kept, else 0, for k < n: two blocks at a
// time from a block's start on where the range goes past it (the second may end early).
inline void keep_multipliers(uint64_t seed, int64_t first, int64_t n, uint32_t keep_below, float scale,
                             float* mult) {
  constexpr int64_t kBlock = philox::kBlock;
  int64_t e = first;
  const int64_t end = first + n;
  while (e < end) {
    const int64_t block = e / kBlock, lo = e - block * kBlock;
    uint64_t bits[2];
    const int blocks = lo == 0 && end - e > kBlock ? 2 : 1;  // the second may be partial
    if (blocks == 2) keep_bits<2>(seed, block, keep_below, bits);
    else keep_bits<1>(seed, block, keep_below, bits);
    for (int b = 0; b < blocks; ++b) {
      const int64_t from = b == 0 ? lo : 0;
      const int64_t to = std::min(kBlock, end - (block + b) * kBlock);
      const uint64_t kept = bits[b] >> from;
      const int64_t count = to - from;
#if defined(CPU_CAPABILITY_AVX512)
      // 16 multipliers a blend, the last ones a masked store: a branch and a store an
      // element took the fused attention's dropout 1.5 ns an element.
      const __m512 vs = _mm512_set1_ps(scale), zero = _mm512_setzero_ps();
      for (int64_t k = 0; k < count; k += 16) {
        const __m512 v = _mm512_mask_blend_ps(static_cast<__mmask16>(kept >> k), zero, vs);
        const int64_t m = std::min<int64_t>(16, count - k);
        if (m == 16) _mm512_storeu_ps(mult + k, v);
        else _mm512_mask_storeu_ps(mult + k, static_cast<__mmask16>((1u << m) - 1), v);
      }
#else
      for (int64_t i = 0; i < count; ++i) mult[i] = (kept >> i) & 1 ? scale : 0.0f;
#endif
      mult += count;
    }
    e = (block + blocks) * kBlock;
  }
}

}  // namespace
}  // namespace kiln::ops::cpu::KILN_CPU_NS
