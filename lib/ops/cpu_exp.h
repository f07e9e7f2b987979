// exp for float vectors, written for the kernels whose result is 1/(1+exp(t))
// (sigmoid, gelu's tanh form): about half the instructions of at::vec's exp_u20 and a
// third of Sleef's, within 2 ULP where exp(t) is a normal float below 2^127.
// Include only from the per-capability kernel files (*_cpu_kernel.cpp): it lives in
// the namespace KILN_CPU_NS, so each build gets its own copy.
#pragma once
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/bit_cast.h>

#include <cstdint>
#include <type_traits>

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

using VecF = at::vec::Vectorized<float>;

// 2^n for the integer n that u = n + 127 + 1.5·2^23 holds in its low mantissa bits:
// shifted into the exponent field, they are the float 2^n (exact for −126 ≤ n ≤ 127;
// n = 128 fills the field: +inf).
inline VecF pow2_from_magic(VecF u) {
#if defined(CPU_CAPABILITY_AVX512)
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(u), 23));
#elif defined(CPU_CAPABILITY_AVX2)
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(u), 23));
#else
  VecF r;
  for (int i = 0; i < VecF::size(); ++i)
    r[i] = c10::bit_cast<float>(c10::bit_cast<uint32_t>(u[i]) << 23);
  return r;
#endif
}

/// exp(t) for t clamped to [−87, cap] (cap ≤ 88.8): n = round(t·log2 e) by the
/// magic-number addition, r = t − n·ln 2 with ln 2 in two parts (Cody–Waite, so r is
/// exact enough for every n here), exp(r) by exp_u20's degree-5 minimax polynomial,
/// 2^n from n's bits: no floor, no float-to-int conversion, no blends.
/// Within 2 ULP for −87 ≤ t < 88.37 (1.96 at worst on a 2^-13 grid). Edges: below
/// −87 it returns exp(−87) ≈ 1.6e-38 (callers add it to 1); from 88.38 on (n = 128,
/// so only when cap allows it) +inf, which 1/(1+e) turns into 0. NaN propagates:
/// each clamp is a max/min with the argument second, which returns a NaN argument.
/// Example: const VecF e = exp_clamped(VecF(0) - two_u, 80.0f);
inline VecF exp_clamped(VecF t, float cap = 88.8f) {
  t = at::vec::clamp_max(at::vec::clamp_min(t, VecF(-87.0f)), VecF(cap));
  const VecF magic(12582912.0f + 127.0f);  // 1.5·2^23 + the exponent bias
  const VecF u = at::vec::fmadd(t, VecF(1.44269504088896341f), magic);
  const VecF n = u - magic;
  VecF r = at::vec::fmadd(n, VecF(-0.693359375f), t);  // ln 2's high part: n·it is exact
  r = at::vec::fmadd(n, VecF(2.12194440e-4f), r);       // minus the rest of ln 2
  VecF p = at::vec::fmadd(r, VecF(0.00828929059f), VecF(0.0418978221f));
  p = at::vec::fmadd(p, r, VecF(0.166676521f));
  p = at::vec::fmadd(p, r, VecF(0.499991506f));
  p = at::vec::fmadd(p, r, VecF(0.999999701f));
  p = at::vec::fmadd(p, r, VecF(1.0f));
  return p * pow2_from_magic(u);
}

/// exp(min(v, cap)) for the vector type of a kernel's opmath: exp_clamped in float
/// (cap ≤ 88), Sleef's 1-ULP exp in double. Example: exp_capped(v, 80.0)
template <typename V>
V exp_capped(V v, double cap) {
  if constexpr (std::is_same_v<V, VecF>)
    return exp_clamped(v, static_cast<float>(cap));
  else
    return at::vec::minimum(v, V(cap)).exp();
}

}  // namespace
}  // namespace kiln::ops::cpu::KILN_CPU_NS
