// Vectorised CPU casts between float32 and the 16-bit floats on raw pointers; compiled
// once per CPU capability (KILN_CPU_NS = base | avx2 | avx512) and chosen at run time.
// Why kiln has its own: ATen's CPU cast runs its AVX2 build on AMD's AVX-512 parts, at
// 0.36-0.78 of a copy's bandwidth at a weight's sizes (docs/ops.md); autocast casts
// every weight and its gradient once a step.
#include "../cpu_dtype.h"
#include "../cpu_vec.h"
#include "cast_kernel.h"

#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

using at::vec::Vectorized;
using VF = Vectorized<float>;

// One vector of H (2·VF::size() elements) from two float vectors.
template <typename H>
Vectorized<H> narrow(const float* x) {
  return at::vec::convert_from_float<H>(VF::loadu(x), VF::loadu(x + VF::size()));
}

#if defined(CPU_CAPABILITY_AVX512)
#define KILN_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
// 32 floats at x rounded to bfloat16 by one vcvtne2ps2bf16, which flushes subnormal
// inputs to zero: a vector holding one (|x| < 2^-126, not 0) takes ATen's integer
// rounding instead, so the result is ATen's bit for bit but for NaN's payload.
KILN_BF16_TARGET inline __m512i narrow_native(const float* x) {
  const __m512 lo = _mm512_loadu_ps(x), hi = _mm512_loadu_ps(x + 16);
  const __m512 tiny = _mm512_set1_ps(1.17549435e-38f);  // FLT_MIN
  const __m512 zero = _mm512_setzero_ps();
  const auto sub = [&](__m512 v) {
    const __m512 a = _mm512_abs_ps(v);
    return _mm512_cmp_ps_mask(a, tiny, _CMP_LT_OQ) & _mm512_cmp_ps_mask(a, zero, _CMP_NEQ_OQ);
  };
  if (sub(lo) | sub(hi)) return narrow<c10::BFloat16>(x);
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

KILN_BF16_TARGET void to_bf16_native(const float* x, c10::BFloat16* y, int64_t n, Stores stores) {
  constexpr int64_t kStep = 32;
  int64_t i = 0;
  if (stores == Stores::kStreaming) {
    for (const int64_t head = std::min(n, unaligned_head(y)); i < head; ++i) y[i] = x[i];
    for (; i + kStep <= n; i += kStep) _mm512_stream_si512(reinterpret_cast<__m512i*>(y + i), narrow_native(x + i));
    streaming_fence();
  } else {
    for (; i + kStep <= n; i += kStep) _mm512_storeu_si512(y + i, narrow_native(x + i));
  }
  for (; i < n; ++i) y[i] = x[i];  // c10's rounding: to nearest even, subnormals kept
}
#endif

// y[0, n) = x[0, n) converted, kStep elements at a time by block(i, streaming) (which
// stores non-temporally at the aligned y + i when streaming); the elements before y's
// first aligned vector (when streaming) and the tail through c10's scalar conversion.
template <int64_t kStep, typename From, typename To, typename Block>
void convert_run(const From* x, To* y, int64_t n, bool streaming, const Block& block) {
  int64_t i = 0;
  if (streaming)
    for (const int64_t head = std::min(n, unaligned_head(y)); i < head; ++i) y[i] = x[i];
  for (; i + kStep <= n; i += kStep) block(i, streaming);
  if (streaming) streaming_fence();
  for (; i < n; ++i) y[i] = x[i];
}

template <typename H>
void to_half(const float* x, H* y, int64_t n, Stores stores) {
  convert_run<Vectorized<H>::size()>(x, y, n, kStreamable<H> && stores == Stores::kStreaming,
                                     [&](int64_t i, bool streaming) {
                                       const auto v = narrow<H>(x + i);
                                       streaming ? store_streaming(v, y + i) : v.store(y + i);
                                     });
}

template <typename H>
void from_half(const H* x, float* y, int64_t n, Stores stores) {
  convert_run<Vectorized<H>::size()>(x, y, n, kStreamable<float> && stores == Stores::kStreaming,
                                     [&](int64_t i, bool streaming) {
                                       const auto [lo, hi] = at::vec::convert_to_float<H>(Vectorized<H>::loadu(x + i));
                                       if (streaming) {
                                         store_streaming(lo, y + i);
                                         store_streaming(hi, y + i + VF::size());
                                       } else {
                                         lo.store(y + i);
                                         hi.store(y + i + VF::size());
                                       }
                                     });
}

}  // namespace

void cast_values(DType from, const void* x, DType to, void* y, int64_t n, Stores stores,
                 bool native_bf16) {
  if (from == DType::kFloat) {
    const auto* xf = static_cast<const float*>(x);
#if defined(CPU_CAPABILITY_AVX512)
    if (native_bf16 && to == DType::kBFloat16) return to_bf16_native(xf, static_cast<c10::BFloat16*>(y), n, stores);
#endif
    (void)native_bf16;
    by_dtype(to, [&](auto t) {
      using H = decltype(t);
      if constexpr (std::is_same_v<H, c10::Half> || std::is_same_v<H, c10::BFloat16>) to_half(xf, static_cast<H*>(y), n, stores);
    });
    return;
  }
  by_dtype(from, [&](auto t) {
    using H = decltype(t);
    if constexpr (std::is_same_v<H, c10::Half> || std::is_same_v<H, c10::BFloat16>)
      from_half(static_cast<const H*>(x), static_cast<float*>(y), n, stores);
  });
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
