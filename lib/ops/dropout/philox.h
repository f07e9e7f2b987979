// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11),
// the counter-based generator of ATen's CUDA and of at::Philox4_32: four 32-bit words
// from a 128-bit counter and a 64-bit key, with no state between calls, so any
// element's random number is computed where it is needed, on the CPU and on CUDA
// alike. Written here because ATen's at::Philox4_32 is a stateful engine (one word per
// call) with no vector form; the tests check this one against it word for word.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define KILN_PHILOX_HD __host__ __device__ __forceinline__
#else
#define KILN_PHILOX_HD inline
#endif

namespace kiln::ops::philox {

constexpr uint32_t kW0 = 0x9E3779B9;  // key increments per round (golden ratio, √3 − 1)
constexpr uint32_t kW1 = 0xBB67AE85;
constexpr uint32_t kM0 = 0xD2511F53;  // round multipliers
constexpr uint32_t kM1 = 0xCD9E8D57;
constexpr int kRounds = 10;

struct Words {
  uint32_t v[4];
};

KILN_PHILOX_HD uint32_t mulhi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

/// The four words of counter (counter, 0) under key `seed` — at::Philox4_32(seed, 0,
/// counter)'s first four outputs. Example: auto w = philox::words(seed, i / 4).v[i % 4];
KILN_PHILOX_HD Words words(uint64_t seed, uint64_t counter) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < kRounds; ++r) {
    const uint32_t hi0 = mulhi(kM0, c0), lo0 = kM0 * c0;
    const uint32_t hi1 = mulhi(kM1, c2), lo1 = kM1 * c2;
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// Which random word an element's keep/drop decision takes: the elements are taken in
// blocks of 64; element e of block b uses word (e / 16) % 4 of counter 16·b + e % 16.
// Sixteen neighbouring elements thus come from sixteen neighbouring counters: the CPU
// computes one block with 16 counters in the lanes of a vector, and a CUDA warp's
// stores stay contiguous.
constexpr int64_t kBlock = 64;
constexpr int64_t kLanes = 16;

/// The counter element `e` draws from. Example: philox::counter_of(70) == 22
KILN_PHILOX_HD uint64_t counter_of(int64_t e) {
  return static_cast<uint64_t>(e / kBlock) * kLanes + static_cast<uint64_t>(e % kLanes);
}
/// The word of that counter's four element `e` takes. Example: philox::word_of(70) == 0
KILN_PHILOX_HD int word_of(int64_t e) { return static_cast<int>((e % kBlock) / kLanes); }

}  // namespace kiln::ops::philox
