// Fused causal attention on the CPU for bfloat16 and float32, one head at a time: the head's q, k
// and v (at most a few hundred KiB) are packed into per-thread scratch, the scores of
// a block of kRows queries are computed, softmaxed and multiplied by v while they sit
// in L1/L2, and the backward recomputes them from the saved log-sum-exp (flash
// attention's scheme) instead of reading a (B·heads, T, T) matrix back from memory.
// The composite it replaces (baddbmm, softmax, bmm and their backwards) wrote and read
// that matrix about ten times a step and copied q, k, v and the output between
// layouts; here q, k and v are read straight out of the qkv projection's output and
// the output and the gradients are written straight into the layouts the next
// products take.
//
// The products run on bfloat16 pairs with float32 sums: C[m][n] += A[m][2p]·B[p][n].lo
// + A[m][2p+1]·B[p][n].hi, B packed as 32-bit words of two bfloat16 ("VNNI" layout),
// which is what AVX512-BF16's vdpbf16ps computes for 16 columns at once; other CPUs
// (and builds) run the same arithmetic in plain float loops. The softmax, its
// gradient and every sum are float32; P and dS are rounded to bfloat16 before they
// enter a product, as in any bf16 attention kernel. The forward rounds the exps
// themselves and divides the output row by their sum (flash attention's order). Where
// the CPU has AVX512-BF16 the roundings are its conversion instruction (round_row).
// float32 (its section at the end) takes the same passes with float32 FMAs on plain rows
// and no rounding.
// Compiled once per CPU capability (KILN_CPU_NS = base | avx2 | avx512), without
// OpenMP: the caller spreads the heads over threads (attention_cpu.cpp).
#include "attention_kernel.h"

#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>
#include <c10/util/bit_cast.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <tuple>
#include <vector>

#include "../cpu_exp.h"
#include "../dropout/philox_cpu.h"

#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
#include <immintrin.h>
#endif

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

constexpr int64_t kRows = 32;  // queries per block: their scores are kRows × T floats

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

inline float to_float(uint16_t h) { return c10::bit_cast<float>(static_cast<uint32_t>(h) << 16); }
inline uint16_t to_bf16(float f) { return c10::BFloat16(f).x; }  // round to nearest even
inline uint32_t pair(uint16_t lo, uint16_t hi) { return lo | static_cast<uint32_t>(hi) << 16; }

// y[0, n) = s · x[0, n) rounded to bfloat16 (ATen's rounding, any AVX level).
void round_row_scaled(const float* x, float s, uint16_t* y, int64_t n) {
  constexpr int64_t kW = VecF::size();
  const VecF vs(s);
  int64_t i = 0;
  for (; i + 2 * kW <= n; i += 2 * kW)
    at::vec::convert_float_bfloat16(VecF::loadu(x + i) * vs, VecF::loadu(x + i + kW) * vs).store(y + i);
  for (; i < n; ++i) y[i] = to_bf16(s * x[i]);
}

// Σ_j a[j]·b[j] over two bfloat16 rows, in float32.
float dot_row(const uint16_t* a, const uint16_t* b, int64_t n) {
  using VecB = at::vec::Vectorized<c10::BFloat16>;
  constexpr int64_t kB = VecB::size();
  VecF acc(0.0f);
  for (int64_t j = 0; j < n; j += kB) {
    const int64_t m = std::min(kB, n - j);
    const auto [a0, a1] = at::vec::convert_bfloat16_float(VecB::loadu(a + j, m));
    const auto [b0, b1] = at::vec::convert_bfloat16_float(VecB::loadu(b + j, m));
    acc = at::vec::fmadd(a0, b0, acc);  // lanes past m load as zeros
    acc = at::vec::fmadd(a1, b1, acc);
  }
  return at::vec::vec_reduce_all<float>([](VecF x, VecF y) { return x + y; }, acc);
}

// ---- C (M × N float32) (+)= A · B on bfloat16 pairs --------------------------------
// A: M rows of np words (two bfloat16 each), lda words apart; B: np rows of N words,
// ldb apart; C: ldc floats apart. M is a multiple of 8 and N of 16 (the callers pad).

void dot_plain(const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb, int64_t np,
               float* c, int64_t ldc, int64_t m_rows, int64_t n_cols, bool accumulate) {
  for (int64_t m = 0; m < m_rows; ++m) {
    float* crow = c + m * ldc;
    if (!accumulate) std::fill(crow, crow + n_cols, 0.0f);
    for (int64_t p = 0; p < np; ++p) {
      const uint32_t w = a[m * lda + p];
      const float a0 = to_float(static_cast<uint16_t>(w)), a1 = to_float(static_cast<uint16_t>(w >> 16));
      const uint32_t* brow = b + p * ldb;
      for (int64_t n = 0; n < n_cols; ++n)
        crow[n] += a0 * to_float(static_cast<uint16_t>(brow[n])) +
                   a1 * to_float(static_cast<uint16_t>(brow[n] >> 16));
    }
  }
}

#if defined(CPU_CAPABILITY_AVX512)
#define KILN_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// One MR × 16·NB tile of C: MR·NB accumulators, one vdpbf16ps each per word of A.
template <int MR, int NB>
KILN_BF16_TARGET inline void dot_tile(const uint32_t* a, int64_t lda, const uint32_t* b,
                                      int64_t ldb, int64_t np, float* c, int64_t ldc,
                                      bool accumulate) {
  __m512 acc[MR][NB];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NB; ++j)
      acc[i][j] = accumulate ? _mm512_loadu_ps(c + i * ldc + 16 * j) : _mm512_setzero_ps();
  for (int64_t p = 0; p < np; ++p) {
    __m512bh bv[NB];
    for (int j = 0; j < NB; ++j) bv[j] = (__m512bh)_mm512_loadu_si512(b + p * ldb + 16 * j);
    for (int i = 0; i < MR; ++i) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[i * lda + p]));
      for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], av, bv[j]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NB; ++j) _mm512_storeu_ps(c + i * ldc + 16 * j, acc[i][j]);
}

// 4 × 64 tiles over the wide part of N (16 accumulators), then 8 × 32 and 8 × 16.
KILN_BF16_TARGET void dot_bf16(const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb,
                               int64_t np, float* c, int64_t ldc, int64_t m_rows, int64_t n_cols,
                               bool accumulate) {
  int64_t n = 0;
  for (; n + 64 <= n_cols; n += 64)
    for (int64_t m = 0; m < m_rows; m += 4)
      dot_tile<4, 4>(a + m * lda, lda, b + n, ldb, np, c + m * ldc + n, ldc, accumulate);
  for (; n + 32 <= n_cols; n += 32)
    for (int64_t m = 0; m < m_rows; m += 8)
      dot_tile<8, 2>(a + m * lda, lda, b + n, ldb, np, c + m * ldc + n, ldc, accumulate);
  for (; n < n_cols; n += 16)
    for (int64_t m = 0; m < m_rows; m += 8)
      dot_tile<8, 1>(a + m * lda, lda, b + n, ldb, np, c + m * ldc + n, ldc, accumulate);
}
#endif

void dot(bool bf16_dot, const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb, int64_t np,
         float* c, int64_t ldc, int64_t m_rows, int64_t n_cols, bool accumulate) {
#if defined(CPU_CAPABILITY_AVX512)
  if (bf16_dot) return dot_bf16(a, lda, b, ldb, np, c, ldc, m_rows, n_cols, accumulate);
#endif
  (void)bf16_dot;
  dot_plain(a, lda, b, ldb, np, c, ldc, m_rows, n_cols, accumulate);
}

// ---- rounding float rows to bfloat16 -----------------------------------------------

#if defined(CPU_CAPABILITY_AVX512)
// round_row_scaled with AVX512-BF16's conversion: one vcvtne2ps2bf16 per 32 floats
// where ATen's portable rounding takes several integer operations a vector (both round
// to nearest even; this one also makes denormals zero, far below what a bfloat16
// product here resolves). With max2 and pack_rows' unmasked stores it made the forward
// 1.10-1.38x faster at the GPT's shape (docs/ops.md).
KILN_BF16_TARGET void round_row_native(const float* x, float s, uint16_t* y, int64_t n) {
  const __m512 vs = _mm512_set1_ps(s);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_mul_ps(_mm512_loadu_ps(x + i), vs), hi = _mm512_mul_ps(_mm512_loadu_ps(x + i + 16), vs);
    _mm512_storeu_si512(y + i, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
  for (; i < n; i += 16) {  // masked only here: a masked store is slow on Zen 4
    const auto m = static_cast<__mmask16>(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs);
    _mm256_mask_storeu_epi16(y + i, m, (__m256i)_mm512_cvtneps_pbh(v));
  }
}
#endif

// y[0, n) = s · x[0, n) rounded to bfloat16: AVX512-BF16's conversion where `native`.
void round_row(bool native, const float* x, float s, uint16_t* y, int64_t n) {
#if defined(CPU_CAPABILITY_AVX512)
  if (native) return round_row_native(x, s, y, n);
#endif
  (void)native;
  round_row_scaled(x, s, y, n);
}

// ---- packing one head's operands (zero past T rows and past d columns) -------------

struct Head {
  const uint16_t* base;  // element (t = 0, j = 0)
  int64_t ld;            // elements between rows t and t + 1
};

// o[j] = (r0[j], r1[j]) for j < n: two bfloat16 rows interleaved into words.
void interleave(const uint16_t* r0, const uint16_t* r1, uint32_t* o, int64_t n) {
  int64_t j = 0;
#if defined(CPU_CAPABILITY_AVX512)
  const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                      39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  for (; j + 32 <= n; j += 32) {
    const __m512i a = _mm512_loadu_si512(r0 + j), b = _mm512_loadu_si512(r1 + j);
    _mm512_storeu_si512(o + j, _mm512_permutex2var_epi16(a, lo, b));
    _mm512_storeu_si512(o + j + 16, _mm512_permutex2var_epi16(a, hi, b));
  }
#endif
  for (; j < n; ++j) o[j] = pair(r0[j], r1[j]);
}

#if defined(CPU_CAPABILITY_AVX512)
// r[c] = column c of the 16 × 16 block of 32-bit elements whose rows r held.
inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) {
      t[8 * i + k] = _mm512_shuffle_i32x4(r[8 * i + k], r[8 * i + 4 + k], 0x88);
      t[8 * i + 4 + k] = _mm512_shuffle_i32x4(r[8 * i + k], r[8 * i + 4 + k], 0xdd);
    }
  for (int k = 0; k < 8; ++k) {
    r[k] = _mm512_shuffle_i32x4(t[k], t[8 + k], 0x88);
    r[8 + k] = _mm512_shuffle_i32x4(t[k], t[8 + k], 0xdd);
  }
}
#endif

// out[c][r] = in[r][c] for r < rows, c < cols: 32-bit elements (words, or floats).
void transpose32(const uint32_t* in, int64_t ld_in, int64_t rows, int64_t cols, uint32_t* out,
                 int64_t ld_out) {
  int64_t r0 = 0;
#if defined(CPU_CAPABILITY_AVX512)
  const int64_t c_done = cols - cols % 16;
  for (; r0 + 16 <= rows; r0 += 16)
    for (int64_t c0 = 0; c0 < c_done; c0 += 16) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(in + (r0 + i) * ld_in + c0);
      transpose16(r);
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(out + (c0 + i) * ld_out + r0, r[i]);
    }
  for (int64_t r = 0; r < r0; ++r)  // the columns past the last 16 of the rows done
    for (int64_t c = c_done; c < cols; ++c) out[c * ld_out + r] = in[r * ld_in + c];
#endif
  for (int64_t r = r0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c * ld_out + r] = in[r * ld_in + c];
}

// rows (rows_pad × d_pad bfloat16): x's rows as they are, the A operand of x·(…).
void pack_rows(Head x, int64_t t_len, int64_t d, int64_t rows_pad, int64_t d_pad, uint16_t* out) {
  for (int64_t t = 0; t < t_len; ++t) {
    uint16_t* o = out + t * d_pad;
    const uint16_t* r = x.base + t * x.ld;
#if defined(CPU_CAPABILITY_AVX512)
    // 32 bfloat16 at a time, no call to memcpy for 64 bytes; the loads past d masked
    // (zeros), no store masked: d_pad is a multiple of 16, and a masked store costs
    // Zen 4 more than the whole row's copy (a masked pair made this 8 % of the
    // forward's time).
    int64_t j = 0;
    for (; j + 32 <= d; j += 32) _mm512_storeu_si512(o + j, _mm512_loadu_si512(r + j));
    for (; j < d_pad; j += 32) {
      const int64_t m = std::clamp<int64_t>(d - j, 0, 32);
      const __m512i v = _mm512_maskz_loadu_epi16(static_cast<__mmask32>((uint64_t{1} << m) - 1), r + j);
      if (d_pad - j >= 32) _mm512_storeu_si512(o + j, v);
      else _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + j), _mm512_castsi512_si256(v));
    }
#else
    for (int64_t j = 0; j < d; ++j) o[j] = r[j];
    for (int64_t j = d; j < d_pad; ++j) o[j] = 0;
#endif
  }
  std::fill(out + t_len * d_pad, out + rows_pad * d_pad, uint16_t{0});
}

// words (d_pad/2 × rows_pad): word [p][t] = (x[t][2p], x[t][2p+1]): the B operand of
// (…)·xᵀ, whose sums run over d. rows is pack_rows' output: a transpose of its words.
void pack_transposed_pairs(const uint16_t* rows, int64_t rows_pad, int64_t d_pad, uint32_t* out) {
  transpose32(reinterpret_cast<const uint32_t*>(rows), d_pad / 2, rows_pad, d_pad / 2, out, rows_pad);
}

// words (rows_pad/2 × d_pad): word [p][j] = (x[2p][j], x[2p+1][j]): the B operand of
// (…)·x, whose sums run over t. rows is pack_rows' output.
void pack_row_pairs(const uint16_t* rows, int64_t rows_pad, int64_t d_pad, uint32_t* out) {
  for (int64_t p = 0; p < rows_pad / 2; ++p)
    interleave(rows + 2 * p * d_pad, rows + (2 * p + 1) * d_pad, out + p * d_pad, d_pad);
}

// words (d_pad × rows_pad/2): word [j][p] = (x[2p][j], x[2p+1][j]): xᵀ as the A
// operand of xᵀ·(…), whose sums run over t. pairs is pack_row_pairs' output.
void pack_transposed(const uint32_t* pairs, int64_t rows_pad, int64_t d_pad, uint32_t* out) {
  transpose32(pairs, d_pad, rows_pad / 2, d_pad, out, rows_pad / 2);
}

// words (rows/2 × n): word [p][n] = (x[2p][n], x[2p+1][n]) of a bfloat16 block x
// (rows × n, ldx apart): P and dS as the B operand of (…)ᵀ·P.
void interleave_row_pairs(const uint16_t* x, int64_t ldx, int64_t rows, int64_t n, uint32_t* out,
                          int64_t ldo) {
  for (int64_t p = 0; p < rows / 2; ++p) interleave(x + 2 * p * ldx, x + (2 * p + 1) * ldx, out + p * ldo, n);
}

// ---- the softmax rows -------------------------------------------------------------

// The larger of two vectors: the plain instruction where there is one, without
// at::vec::maximum's NaN propagation (a NaN score still reaches the output: exp(NaN)
// enters its row's sum).
inline VecF max2(VecF a, VecF b) {
#if defined(CPU_CAPABILITY_AVX512)
  return _mm512_max_ps(a, b);
#elif defined(CPU_CAPABILITY_AVX2)
  return _mm256_max_ps(a, b);
#else
  return at::vec::maximum(a, b);
#endif
}

float max_of(const float* s, int64_t len) {
  constexpr int64_t kW = VecF::size();
  VecF vm(-std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + kW <= len; j += kW) vm = max2(vm, VecF::loadu(s + j));
  if (j < len) vm = max2(vm, VecF::set(vm, VecF::loadu(s + j, len - j), len - j));
  return at::vec::vec_reduce_all<float>([](VecF x, VecF y) { return max2(x, y); }, vm);
}

// The rows below are processed in blocks of kPair floats, rounded to bfloat16 two
// vectors at a time; the padded row lengths (multiples of kRows) are multiples of it.
constexpr int64_t kPair = 2 * VecF::size();
static_assert(kRows % kPair == 0);

// The lanes j < len of the vector at x + j0, zeros for the rest: nothing past len is
// read (past it the score rows hold the products of keys a query does not see).
inline int64_t lanes(int64_t j0, int64_t len) { return std::clamp<int64_t>(len - j0, 0, VecF::size()); }
inline VecF load_lanes(const float* x, int64_t n) {
  return n == VecF::size() ? VecF::loadu(x) : n == 0 ? VecF(0.0f) : VecF::loadu(x, n);
}

// exp(scale·s[j] − shift) for the lanes j < len of the vector at s + j0, zeros after.
inline VecF exp_lanes(const float* s, int64_t j0, int64_t len, VecF scale, VecF shift) {
  const int64_t n = lanes(j0, len);
  if (n == 0) return VecF(0.0f);
  const VecF e = exp_clamped(at::vec::fmsub(load_lanes(s + j0, n), scale, shift), 0.0f);
  return n == VecF::size() ? e : VecF::set(VecF(0.0f), e, n);
}

// s[0, nk) = exp(scale·s − top) for j < len and zero after, top the row's largest
// scaled score; returns (top, the sum of the exps). The division by that sum is left
// to the output row (flash attention's order). With dropout, mult[0, len) (scale or 0
// per key) multiplies the exps after their sum, which stays the undropped softmax's:
// the weights are dropped after normalising.
std::pair<float, float> exp_row(float* s, int64_t len, int64_t nk, float scale, const float* mult) {
  constexpr int64_t kW = VecF::size();
  const float top = scale * max_of(s, len);  // scale > 0
  const VecF vscale(scale), vtop(top);
  VecF vsum(0.0f);
  for (int64_t j = 0; j < nk; j += kPair) {
    const VecF e0 = exp_lanes(s, j, len, vscale, vtop), e1 = exp_lanes(s, j + kW, len, vscale, vtop);
    vsum += e0 + e1;
    e0.store(s + j);
    e1.store(s + j + kW);
  }
  if (mult != nullptr)
    for (int64_t j = 0; j < len; ++j) s[j] *= mult[j];
  return {top, at::vec::vec_reduce_all<float>([](VecF x, VecF y) { return x + y; }, vsum)};
}

// exp_row, then the exps rounded into p[0, nk) as bfloat16 in a pass of their own over
// the row, still in L1: the rounding is then one instruction where the CPU has
// AVX512-BF16 (round_row), which a kernel compiled for plain AVX-512 cannot inline.
std::pair<float, float> exp_round_row(float* s, int64_t len, int64_t nk, float scale, uint16_t* p,
                                      bool native, const float* mult) {
  const auto top_sum = exp_row(s, len, nk, scale, mult);
  round_row(native, s, 1.0f, p, nk);
  return top_sum;
}

// The softmax's gradient with respect to the scaled scores, in place: p = exp(scale·s −
// lse) over s and ds = p·(dp − delta) over dp for j < len, zeros after, to nk.
// With dropout (mult: scale or 0 per key, as the forward drew it) the output took
// z = mult·p: s gets z (dV = dOᵀ·Z), and ds = p·(mult·dp − delta) — delta = Σ dO·O is
// Σ_j dZ·Z, the same sum (flash attention's dropout backward).
void softmax_grad_row(float* s, float* dp, int64_t len, int64_t nk, float scale, float lse, float delta,
                      const float* mult) {
  constexpr int64_t kW = VecF::size();
  const VecF vscale(scale), vlse(lse), vdelta(delta);
  for (int64_t j = 0; j < nk; j += kPair) {
    VecF p0 = exp_lanes(s, j, len, vscale, vlse), p1 = exp_lanes(s, j + kW, len, vscale, vlse);
    VecF d0 = load_lanes(dp + j, lanes(j, len)), d1 = load_lanes(dp + j + kW, lanes(j + kW, len));
    VecF g0, g1;
    if (mult != nullptr) {
      const VecF m0 = load_lanes(mult + j, lanes(j, len)), m1 = load_lanes(mult + j + kW, lanes(j + kW, len));
      g0 = p0 * (d0 * m0 - vdelta);
      g1 = p1 * (d1 * m1 - vdelta);
      p0 = p0 * m0;
      p1 = p1 * m1;
    } else {
      g0 = p0 * (d0 - vdelta);
      g1 = p1 * (d1 - vdelta);
    }
    p0.store(s + j);
    p1.store(s + j + kW);
    g0.store(dp + j);
    g1.store(dp + j + kW);
  }
}

// softmax_grad_row, then p (or z) and ds rounded for the products into pb and dsb [0, nk).
void softmax_grad_round_row(float* s, float* dp, int64_t len, int64_t nk, float scale, float lse,
                            float delta, uint16_t* pb, uint16_t* dsb, bool native, const float* mult) {
  softmax_grad_row(s, dp, len, nk, scale, lse, delta, mult);
  round_row(native, s, 1.0f, pb, nk);
  round_row(native, dp, 1.0f, dsb, nk);
}

// ---- per-thread scratch and the two passes ------------------------------------------

struct Sizes {
  int64_t t, d, c, ld, t_pad, d_pad;
  float scale;
  explicit Sizes(const AttentionShape& s)
      : t(s.time),
        d(s.head_dim),
        c(s.heads * s.head_dim),
        ld(3 * s.heads * s.head_dim),
        t_pad(round_up(s.time, kRows)),
        d_pad(round_up(s.head_dim, 16)),
        scale(static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)))) {}
};

inline const uint32_t* as_words(const uint16_t* x) { return reinterpret_cast<const uint32_t*>(x); }

struct ForwardScratch {
  std::vector<uint16_t> q, rows, p;
  std::vector<uint32_t> kt, v;
  std::vector<float> s, o, mult;
  explicit ForwardScratch(const Sizes& z)
      : q(z.t_pad * z.d_pad), rows(z.t_pad * z.d_pad), p(kRows * z.t_pad), kt(z.d_pad / 2 * z.t_pad), v(z.t_pad / 2 * z.d_pad),
        s(kRows * z.t_pad), o(kRows * z.d_pad), mult(z.t_pad) {}
};

// Asks for rows [t0, t1) of the next head's operands (next + offset + t·ld, d bfloat16
// each; nothing when next is null) while this head computes, a block of rows at a
// time: they lie ld apart, and packing them waited on memory for a tenth of the
// forward's time.
template <typename T>
void prefetch_rows(const T* next, int64_t ld, int64_t t0, int64_t t1, int64_t d,
                   std::initializer_list<int64_t> offsets) {
  if (next == nullptr) return;
  constexpr int64_t kLine = 64 / sizeof(T);  // elements a cache line
  for (const int64_t off : offsets)
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t j = 0; j < d; j += kLine) __builtin_prefetch(next + off + t * ld + j, 0, 2);
}

// Query i's dropout multipliers of head bh (keys 0..len−1) into mult, or null without
// dropout: the weights' elements (bh·T + i)·T + j, as kiln::dropout numbers them.
const float* weight_mults(const AttentionDropout& drop, const Sizes& z, int64_t bh, int64_t i, int64_t len,
                          float* mult) {
  if (!drop.active) return nullptr;
  keep_multipliers(drop.seed, (bh * z.t + i) * z.t, len, drop.keep_below, drop.scale, mult);
  return mult;
}

void forward_head(const Sizes& z, const AttentionDropout& drop, int64_t bh, const uint16_t* qkv,
                  const uint16_t* next, uint16_t* out, float* lse, bool bf16_dot, ForwardScratch& w) {
  const Head q{qkv, z.ld}, k{qkv + z.c, z.ld}, v{qkv + 2 * z.c, z.ld};
  pack_rows(q, z.t, z.d, z.t_pad, z.d_pad, w.q.data());
  pack_rows(k, z.t, z.d, z.t_pad, z.d_pad, w.rows.data());
  pack_transposed_pairs(w.rows.data(), z.t_pad, z.d_pad, w.kt.data());
  pack_rows(v, z.t, z.d, z.t_pad, z.d_pad, w.rows.data());
  pack_row_pairs(w.rows.data(), z.t_pad, z.d_pad, w.v.data());
  for (int64_t i0 = 0; i0 < z.t; i0 += kRows) {
    const int64_t nk = i0 + kRows;  // the keys any of these queries sees, padded
    prefetch_rows(next, z.ld, i0, std::min(z.t, i0 + kRows), z.d, {0, z.c, 2 * z.c});
    dot(bf16_dot, as_words(w.q.data() + i0 * z.d_pad), z.d_pad / 2, w.kt.data(), z.t_pad, z.d_pad / 2,
        w.s.data(), z.t_pad, kRows, nk, false);
    float top[kRows], sum[kRows];
    for (int64_t r = 0; r < kRows; ++r) {
      const int64_t i = i0 + r;
      const int64_t len = i < z.t ? i + 1 : 0;  // query i sees keys 0..i
      std::tie(top[r], sum[r]) =
          len > 0 ? exp_round_row(w.s.data() + r * z.t_pad, len, nk, z.scale, w.p.data() + r * z.t_pad, bf16_dot,
                                  weight_mults(drop, z, bh, i, len, w.mult.data()))
                  : std::pair{0.0f, 1.0f};
      if (len == 0) std::fill_n(w.p.data() + r * z.t_pad, nk, uint16_t{0});
    }
    for (int64_t r = 0; r < kRows; r += VecF::size()) {  // lse = top + log(sum), kRows at once
      const VecF l = VecF::loadu(top + r) + VecF::loadu(sum + r).log();
      const int64_t n = std::clamp<int64_t>(z.t - (i0 + r), 0, VecF::size());
      if (n > 0) l.store(lse + i0 + r, n);
    }
    dot(bf16_dot, as_words(w.p.data()), z.t_pad / 2, w.v.data(), z.d_pad, nk / 2, w.o.data(), z.d_pad,
        kRows, z.d_pad, false);
    for (int64_t r = 0; r < kRows && i0 + r < z.t; ++r)  // the softmax's division, here
      round_row(bf16_dot, w.o.data() + r * z.d_pad, 1.0f / sum[r], out + (i0 + r) * z.c, z.d);
  }
}

struct BackwardScratch {
  std::vector<uint16_t> q, g, rows, pb, dsb;
  std::vector<uint32_t> qt, gt, pairs, kt, vt, k, pw, dsw;
  std::vector<float> delta, s, dp, dq, dvt, dkt, rows_f, mult;
  explicit BackwardScratch(const Sizes& z)
      : q(z.t_pad * z.d_pad), g(z.t_pad * z.d_pad), rows(z.t_pad * z.d_pad), pb(kRows * z.t_pad),
        dsb(kRows * z.t_pad), qt(z.d_pad * z.t_pad / 2), gt(z.d_pad * z.t_pad / 2),
        pairs(z.t_pad / 2 * z.d_pad), kt(z.d_pad / 2 * z.t_pad), vt(z.d_pad / 2 * z.t_pad),
        k(z.t_pad / 2 * z.d_pad), pw(kRows / 2 * z.t_pad), dsw(kRows / 2 * z.t_pad), delta(z.t_pad),
        s(kRows * z.t_pad), dp(kRows * z.t_pad), dq(kRows * z.d_pad), dvt(z.d_pad * z.t_pad),
        dkt(z.d_pad * z.t_pad), rows_f(z.t_pad * z.d_pad), mult(z.t_pad) {}
};

// One head's rows in the backward's three inputs: grad and out (T, C) rows of this
// head's columns, qkv as in the forward (all null: no head).
template <typename T = uint16_t>
struct HeadInputs {
  const T *grad = nullptr, *qkv = nullptr, *out = nullptr;
};

// dqkv like qkv; next: the following head's inputs, prefetched a block at a time.
void backward_head(const Sizes& z, const AttentionDropout& drop, int64_t bh, const HeadInputs<>& in,
                   const HeadInputs<>& next, const float* lse, uint16_t* dqkv, bool bf16_dot, BackwardScratch& w) {
  const uint16_t *grad = in.grad, *qkv = in.qkv, *out = in.out;
  const Head q{qkv, z.ld}, k{qkv + z.c, z.ld}, v{qkv + 2 * z.c, z.ld}, g{grad, z.c};
  pack_rows(q, z.t, z.d, z.t_pad, z.d_pad, w.q.data());
  pack_rows(g, z.t, z.d, z.t_pad, z.d_pad, w.g.data());
  pack_row_pairs(w.q.data(), z.t_pad, z.d_pad, w.pairs.data());
  pack_transposed(w.pairs.data(), z.t_pad, z.d_pad, w.qt.data());
  pack_row_pairs(w.g.data(), z.t_pad, z.d_pad, w.pairs.data());
  pack_transposed(w.pairs.data(), z.t_pad, z.d_pad, w.gt.data());
  pack_rows(k, z.t, z.d, z.t_pad, z.d_pad, w.rows.data());
  pack_transposed_pairs(w.rows.data(), z.t_pad, z.d_pad, w.kt.data());
  pack_row_pairs(w.rows.data(), z.t_pad, z.d_pad, w.k.data());
  pack_rows(v, z.t, z.d, z.t_pad, z.d_pad, w.rows.data());
  pack_transposed_pairs(w.rows.data(), z.t_pad, z.d_pad, w.vt.data());
  for (int64_t i = 0; i < z.t; ++i)  // delta_i = Σ_j dO[i][j]·O[i][j]
    w.delta[i] = dot_row(grad + i * z.c, out + i * z.c, z.d);
  std::fill(w.dvt.begin(), w.dvt.end(), 0.0f);
  std::fill(w.dkt.begin(), w.dkt.end(), 0.0f);
  for (int64_t i0 = 0; i0 < z.t; i0 += kRows) {
    const int64_t nk = i0 + kRows;
    const int64_t i1 = std::min(z.t, i0 + kRows);
    prefetch_rows(next.qkv, z.ld, i0, i1, z.d, {0, z.c, 2 * z.c});
    prefetch_rows(next.grad, z.c, i0, i1, z.d, {0});
    prefetch_rows(next.out, z.c, i0, i1, z.d, {0});
    dot(bf16_dot, as_words(w.q.data() + i0 * z.d_pad), z.d_pad / 2, w.kt.data(), z.t_pad, z.d_pad / 2,
        w.s.data(), z.t_pad, kRows, nk, false);  // S = Q·Kᵀ
    dot(bf16_dot, as_words(w.g.data() + i0 * z.d_pad), z.d_pad / 2, w.vt.data(), z.t_pad, z.d_pad / 2,
        w.dp.data(), z.t_pad, kRows, nk, false);  // dP = dO·Vᵀ
    for (int64_t r = 0; r < kRows; ++r) {
      const int64_t i = i0 + r;
      const int64_t len = i < z.t ? i + 1 : 0;  // len 0: all zeros, lse and delta unread
      softmax_grad_round_row(w.s.data() + r * z.t_pad, w.dp.data() + r * z.t_pad, len, nk, z.scale,
                             len > 0 ? lse[i] : 0.0f, len > 0 ? w.delta[i] : 0.0f,
                             w.pb.data() + r * z.t_pad, w.dsb.data() + r * z.t_pad, bf16_dot,
                             len > 0 ? weight_mults(drop, z, bh, i, len, w.mult.data()) : nullptr);
    }
    // dQ = dS·K·scale, complete for these queries.
    dot(bf16_dot, as_words(w.dsb.data()), z.t_pad / 2, w.k.data(), z.d_pad, nk / 2, w.dq.data(), z.d_pad,
        kRows, z.d_pad, false);
    for (int64_t r = 0; r < kRows && i0 + r < z.t; ++r)
      round_row(bf16_dot, w.dq.data() + r * z.d_pad, z.scale, dqkv + (i0 + r) * z.ld, z.d);
    // dVᵀ += dOᵀ·P and dKᵀ += Qᵀ·dS over this block's queries.
    interleave_row_pairs(w.pb.data(), z.t_pad, kRows, nk, w.pw.data(), z.t_pad);
    interleave_row_pairs(w.dsb.data(), z.t_pad, kRows, nk, w.dsw.data(), z.t_pad);
    dot(bf16_dot, w.gt.data() + i0 / 2, z.t_pad / 2, w.pw.data(), z.t_pad, kRows / 2, w.dvt.data(),
        z.t_pad, z.d_pad, nk, true);
    dot(bf16_dot, w.qt.data() + i0 / 2, z.t_pad / 2, w.dsw.data(), z.t_pad, kRows / 2, w.dkt.data(),
        z.t_pad, z.d_pad, nk, true);
  }
  // dKᵀ and dVᵀ (d_pad × T) back to rows, then rounded into dqkv.
  for (const auto& [src, dst, scale] :
       {std::tuple{w.dkt.data(), dqkv + z.c, z.scale}, std::tuple{w.dvt.data(), dqkv + 2 * z.c, 1.0f}}) {
    transpose32(reinterpret_cast<const uint32_t*>(src), z.t_pad, z.d_pad, z.t_pad,
                reinterpret_cast<uint32_t*>(w.rows_f.data()), z.d_pad);
    for (int64_t n = 0; n < z.t; ++n) round_row(bf16_dot, w.rows_f.data() + n * z.d_pad, scale, dst + n * z.ld, z.d);
  }
}

// ---- float32 --------------------------------------------------------------------------
// The same two passes on float32 q, k, v: the products are float32 FMAs on plain rows
// (no pairs, no rounding), the operands packed as rows and, where a product sums over
// t or d the other way round, as their transposes (transpose32 moves floats as words).

// C (M × N) (+)= A (M × K, lda floats apart) · B (K × N, ldb apart): one MR × NB·kW
// tile of C in MR·NB accumulators, one FMA each per element of A.
template <int MR, int NB>
inline void dot_tile_f32(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t k, float* c,
                         int64_t ldc, bool accumulate) {
  constexpr int64_t kW = VecF::size();
  VecF acc[MR][NB];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NB; ++j) acc[i][j] = accumulate ? VecF::loadu(c + i * ldc + kW * j) : VecF(0.0f);
  for (int64_t p = 0; p < k; ++p) {
    VecF bv[NB];
    for (int j = 0; j < NB; ++j) bv[j] = VecF::loadu(b + p * ldb + kW * j);
    for (int i = 0; i < MR; ++i) {
      const VecF av(a[i * lda + p]);
      for (int j = 0; j < NB; ++j) acc[i][j] = at::vec::fmadd(av, bv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NB; ++j) acc[i][j].store(c + i * ldc + kW * j);
}

// M a multiple of 8 and N of 16 (the callers pad). 16-float vectors: 4 × 64 tiles over
// the wide part of N (16 accumulators of the 32 registers), then 8 × 32 and 8 × 16;
// 8-float vectors (AVX2's 16 registers): 4 × 16 tiles.
void dot_f32(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t k, float* c, int64_t ldc,
             int64_t m_rows, int64_t n_cols, bool accumulate) {
  int64_t n = 0;
  if constexpr (VecF::size() == 16) {
    for (; n + 64 <= n_cols; n += 64)
      for (int64_t m = 0; m < m_rows; m += 4)
        dot_tile_f32<4, 4>(a + m * lda, lda, b + n, ldb, k, c + m * ldc + n, ldc, accumulate);
    for (; n + 32 <= n_cols; n += 32)
      for (int64_t m = 0; m < m_rows; m += 8)
        dot_tile_f32<8, 2>(a + m * lda, lda, b + n, ldb, k, c + m * ldc + n, ldc, accumulate);
  }
  constexpr int kCols = static_cast<int>(16 / VecF::size());
  for (; n < n_cols; n += 16)
    for (int64_t m = 0; m < m_rows; m += 4)
      dot_tile_f32<4, kCols>(a + m * lda, lda, b + n, ldb, k, c + m * ldc + n, ldc, accumulate);
}

// rows_pad × d_pad floats: x's rows (d each, ld apart) as they are, zeros past d and T.
void pack_rows_f32(const float* x, int64_t ld, int64_t t_len, int64_t d, int64_t rows_pad, int64_t d_pad,
                   float* out) {
  for (int64_t t = 0; t < t_len; ++t) {
    std::copy_n(x + t * ld, d, out + t * d_pad);
    std::fill(out + t * d_pad + d, out + (t + 1) * d_pad, 0.0f);
  }
  std::fill(out + t_len * d_pad, out + rows_pad * d_pad, 0.0f);
}

// out (d_pad × rows_pad) = rows (rows_pad × d_pad)ᵀ.
void transpose_f32(const float* rows, int64_t rows_pad, int64_t d_pad, float* out) {
  transpose32(reinterpret_cast<const uint32_t*>(rows), d_pad, rows_pad, d_pad, reinterpret_cast<uint32_t*>(out),
              rows_pad);
}

// y[0, n) = s · x[0, n).
void scale_row(const float* x, float s, float* y, int64_t n) {
  constexpr int64_t kW = VecF::size();
  const VecF vs(s);
  int64_t i = 0;
  for (; i + kW <= n; i += kW) (VecF::loadu(x + i) * vs).store(y + i);
  if (i < n) (VecF::loadu(x + i, n - i) * vs).store(y + i, n - i);
}

// Σ_j a[j]·b[j] over two float32 rows.
float dot_row_f32(const float* a, const float* b, int64_t n) {
  constexpr int64_t kW = VecF::size();
  VecF acc(0.0f);
  int64_t j = 0;
  for (; j + kW <= n; j += kW) acc = at::vec::fmadd(VecF::loadu(a + j), VecF::loadu(b + j), acc);
  if (j < n) acc = at::vec::fmadd(VecF::loadu(a + j, n - j), VecF::loadu(b + j, n - j), acc);
  return at::vec::vec_reduce_all<float>([](VecF x, VecF y) { return x + y; }, acc);
}

struct ForwardScratchF32 {
  std::vector<float> q, rows, kt, v, s, o, mult;
  explicit ForwardScratchF32(const Sizes& z)
      : q(z.t_pad * z.d_pad), rows(z.t_pad * z.d_pad), kt(z.d_pad * z.t_pad), v(z.t_pad * z.d_pad),
        s(kRows * z.t_pad), o(kRows * z.d_pad), mult(z.t_pad) {}
};

void forward_head_f32(const Sizes& z, const AttentionDropout& drop, int64_t bh, const float* qkv,
                      const float* next, float* out, float* lse, ForwardScratchF32& w) {
  pack_rows_f32(qkv, z.ld, z.t, z.d, z.t_pad, z.d_pad, w.q.data());
  pack_rows_f32(qkv + z.c, z.ld, z.t, z.d, z.t_pad, z.d_pad, w.rows.data());
  transpose_f32(w.rows.data(), z.t_pad, z.d_pad, w.kt.data());
  pack_rows_f32(qkv + 2 * z.c, z.ld, z.t, z.d, z.t_pad, z.d_pad, w.v.data());
  for (int64_t i0 = 0; i0 < z.t; i0 += kRows) {
    const int64_t nk = i0 + kRows;  // the keys any of these queries sees, padded
    prefetch_rows(next, z.ld, i0, std::min(z.t, i0 + kRows), z.d, {0, z.c, 2 * z.c});
    dot_f32(w.q.data() + i0 * z.d_pad, z.d_pad, w.kt.data(), z.t_pad, z.d, w.s.data(), z.t_pad, kRows, nk,
            false);  // S = Q·Kᵀ
    float top[kRows], sum[kRows];
    for (int64_t r = 0; r < kRows; ++r) {
      const int64_t i = i0 + r;
      const int64_t len = i < z.t ? i + 1 : 0;  // query i sees keys 0..i
      float* srow = w.s.data() + r * z.t_pad;
      if (len == 0) {
        std::fill_n(srow, nk, 0.0f);
        top[r] = 0.0f;
        sum[r] = 1.0f;
        continue;
      }
      std::tie(top[r], sum[r]) = exp_row(srow, len, nk, z.scale, weight_mults(drop, z, bh, i, len, w.mult.data()));
    }
    for (int64_t r = 0; r < kRows; r += VecF::size()) {  // lse = top + log(sum), kRows at once
      const VecF l = VecF::loadu(top + r) + VecF::loadu(sum + r).log();
      const int64_t n = std::clamp<int64_t>(z.t - (i0 + r), 0, VecF::size());
      if (n > 0) l.store(lse + i0 + r, n);
    }
    dot_f32(w.s.data(), z.t_pad, w.v.data(), z.d_pad, nk, w.o.data(), z.d_pad, kRows, z.d_pad, false);  // P·V
    for (int64_t r = 0; r < kRows && i0 + r < z.t; ++r)  // the softmax's division, here
      scale_row(w.o.data() + r * z.d_pad, 1.0f / sum[r], out + (i0 + r) * z.c, z.d);
  }
}

struct BackwardScratchF32 {
  std::vector<float> q, g, k, rows, qt, gt, kt, vt, delta, s, dp, dq, dvt, dkt, mult;
  explicit BackwardScratchF32(const Sizes& z)
      : q(z.t_pad * z.d_pad), g(z.t_pad * z.d_pad), k(z.t_pad * z.d_pad), rows(z.t_pad * z.d_pad),
        qt(z.d_pad * z.t_pad), gt(z.d_pad * z.t_pad), kt(z.d_pad * z.t_pad), vt(z.d_pad * z.t_pad),
        delta(z.t_pad), s(kRows * z.t_pad), dp(kRows * z.t_pad), dq(kRows * z.d_pad), dvt(z.d_pad * z.t_pad),
        dkt(z.d_pad * z.t_pad), mult(z.t_pad) {}
};

void backward_head_f32(const Sizes& z, const AttentionDropout& drop, int64_t bh, const HeadInputs<float>& in,
                       const HeadInputs<float>& next, const float* lse, float* dqkv, BackwardScratchF32& w) {
  pack_rows_f32(in.qkv, z.ld, z.t, z.d, z.t_pad, z.d_pad, w.q.data());
  transpose_f32(w.q.data(), z.t_pad, z.d_pad, w.qt.data());
  pack_rows_f32(in.grad, z.c, z.t, z.d, z.t_pad, z.d_pad, w.g.data());
  transpose_f32(w.g.data(), z.t_pad, z.d_pad, w.gt.data());
  pack_rows_f32(in.qkv + z.c, z.ld, z.t, z.d, z.t_pad, z.d_pad, w.k.data());
  transpose_f32(w.k.data(), z.t_pad, z.d_pad, w.kt.data());
  pack_rows_f32(in.qkv + 2 * z.c, z.ld, z.t, z.d, z.t_pad, z.d_pad, w.rows.data());
  transpose_f32(w.rows.data(), z.t_pad, z.d_pad, w.vt.data());
  for (int64_t i = 0; i < z.t; ++i)  // delta_i = Σ_j dO[i][j]·O[i][j]
    w.delta[i] = dot_row_f32(in.grad + i * z.c, in.out + i * z.c, z.d);
  std::fill(w.dvt.begin(), w.dvt.end(), 0.0f);
  std::fill(w.dkt.begin(), w.dkt.end(), 0.0f);
  for (int64_t i0 = 0; i0 < z.t; i0 += kRows) {
    const int64_t nk = i0 + kRows;
    const int64_t i1 = std::min(z.t, i0 + kRows);
    prefetch_rows(next.qkv, z.ld, i0, i1, z.d, {0, z.c, 2 * z.c});
    prefetch_rows(next.grad, z.c, i0, i1, z.d, {0});
    prefetch_rows(next.out, z.c, i0, i1, z.d, {0});
    dot_f32(w.q.data() + i0 * z.d_pad, z.d_pad, w.kt.data(), z.t_pad, z.d, w.s.data(), z.t_pad, kRows, nk,
            false);  // S = Q·Kᵀ
    dot_f32(w.g.data() + i0 * z.d_pad, z.d_pad, w.vt.data(), z.t_pad, z.d, w.dp.data(), z.t_pad, kRows, nk,
            false);  // dP = dO·Vᵀ
    for (int64_t r = 0; r < kRows; ++r) {
      const int64_t i = i0 + r;
      const int64_t len = i < z.t ? i + 1 : 0;  // len 0: all zeros, lse and delta unread
      softmax_grad_row(w.s.data() + r * z.t_pad, w.dp.data() + r * z.t_pad, len, nk, z.scale,
                       len > 0 ? lse[i] : 0.0f, len > 0 ? w.delta[i] : 0.0f,
                       len > 0 ? weight_mults(drop, z, bh, i, len, w.mult.data()) : nullptr);
    }
    // dQ = dS·K·scale, complete for these queries.
    dot_f32(w.dp.data(), z.t_pad, w.k.data(), z.d_pad, nk, w.dq.data(), z.d_pad, kRows, z.d_pad, false);
    for (int64_t r = 0; r < kRows && i0 + r < z.t; ++r)
      scale_row(w.dq.data() + r * z.d_pad, z.scale, dqkv + (i0 + r) * z.ld, z.d);
    // dVᵀ += dOᵀ·P and dKᵀ += Qᵀ·dS over this block's queries.
    dot_f32(w.gt.data() + i0, z.t_pad, w.s.data(), z.t_pad, kRows, w.dvt.data(), z.t_pad, z.d_pad, nk, true);
    dot_f32(w.qt.data() + i0, z.t_pad, w.dp.data(), z.t_pad, kRows, w.dkt.data(), z.t_pad, z.d_pad, nk, true);
  }
  // dKᵀ and dVᵀ (d_pad × T) back to rows, then scaled into dqkv.
  for (const auto& [src, dst, scale] :
       {std::tuple{w.dkt.data(), dqkv + z.c, z.scale}, std::tuple{w.dvt.data(), dqkv + 2 * z.c, 1.0f}}) {
    transpose32(reinterpret_cast<const uint32_t*>(src), z.t_pad, z.d_pad, z.t_pad,
                reinterpret_cast<uint32_t*>(w.rows.data()), z.d_pad);
    for (int64_t n = 0; n < z.t; ++n) scale_row(w.rows.data() + n * z.d_pad, scale, dst + n * z.ld, z.d);
  }
}

}  // namespace

void causal_attention_forward(const AttentionShape& shape, const AttentionDropout& dropout, const void* qkv,
                              void* out, float* lse, bool bf16_dot, int64_t begin, int64_t end) {
  const Sizes z(shape);
  if (shape.float32) {
    const auto* x = static_cast<const float*>(qkv);
    auto* y = static_cast<float*>(out);
    ForwardScratchF32 w(z);
    const auto head_qkv = [&](int64_t bh) { return x + bh / shape.heads * z.t * z.ld + bh % shape.heads * z.d; };
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / shape.heads, h = bh % shape.heads;
      forward_head_f32(z, dropout, bh, head_qkv(bh), bh + 1 < end ? head_qkv(bh + 1) : nullptr,
                       y + b * z.t * z.c + h * z.d, lse + bh * z.t, w);
    }
    return;
  }
  const auto* x = static_cast<const uint16_t*>(qkv);
  auto* y = static_cast<uint16_t*>(out);
  ForwardScratch w(z);
  const auto head_qkv = [&](int64_t bh) { return x + bh / shape.heads * z.t * z.ld + bh % shape.heads * z.d; };
  for (int64_t bh = begin; bh < end; ++bh) {
    const int64_t b = bh / shape.heads, h = bh % shape.heads;
    forward_head(z, dropout, bh, head_qkv(bh), bh + 1 < end ? head_qkv(bh + 1) : nullptr, y + b * z.t * z.c + h * z.d,
                 lse + bh * z.t, bf16_dot, w);
  }
}

void causal_attention_backward(const AttentionShape& shape, const AttentionDropout& dropout, const void* grad,
                               const void* qkv, const void* out, const float* lse, void* dqkv, bool bf16_dot,
                               int64_t begin, int64_t end) {
  const Sizes z(shape);
  if (shape.float32) {
    const auto* g = static_cast<const float*>(grad);
    const auto* x = static_cast<const float*>(qkv);
    const auto* y = static_cast<const float*>(out);
    auto* dx = static_cast<float*>(dqkv);
    BackwardScratchF32 w(z);
    const auto inputs = [&](int64_t bh) {
      const int64_t rows = bh / shape.heads * z.t, col = bh % shape.heads * z.d;
      return HeadInputs<float>{g + rows * z.c + col, x + rows * z.ld + col, y + rows * z.c + col};
    };
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / shape.heads, h = bh % shape.heads;
      backward_head_f32(z, dropout, bh, inputs(bh), bh + 1 < end ? inputs(bh + 1) : HeadInputs<float>{},
                        lse + bh * z.t, dx + b * z.t * z.ld + h * z.d, w);
    }
    return;
  }
  const auto* g = static_cast<const uint16_t*>(grad);
  const auto* x = static_cast<const uint16_t*>(qkv);
  const auto* y = static_cast<const uint16_t*>(out);
  auto* dx = static_cast<uint16_t*>(dqkv);
  BackwardScratch w(z);
  const auto inputs = [&](int64_t bh) {
    const int64_t rows = bh / shape.heads * z.t, col = bh % shape.heads * z.d;
    return HeadInputs<>{g + rows * z.c + col, x + rows * z.ld + col, y + rows * z.c + col};
  };
  for (int64_t bh = begin; bh < end; ++bh) {
    const int64_t b = bh / shape.heads, h = bh % shape.heads;
    backward_head(z, dropout, bh, inputs(bh), bh + 1 < end ? inputs(bh + 1) : HeadInputs<>{}, lse + bh * z.t,
                  dx + b * z.t * z.ld + h * z.d, bf16_dot, w);
  }
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
