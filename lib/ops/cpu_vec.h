// at::vec helpers the vectorised CPU kernels (*_cpu_kernel.cpp) share: loading
// half types as float vectors; at::vec::map and map2 with a choice of stores.
// Include only from those files: it lives in the per-capability namespace
// KILN_CPU_NS, so each build gets its own copy.
#pragma once
#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#if defined(CPU_CAPABILITY_AVX2) || defined(CPU_CAPABILITY_AVX512)
#include <immintrin.h>
#endif

#include "kernel_types.h"

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

// The first n values of v (n ≤ its size) stored at p as T: a half type rounded once.
template <typename T>
void store_acc(const Vectorized<Acc<T>>& v, T* p, int64_t n) {
  if constexpr (std::is_same_v<T, Acc<T>>) v.store(p, n);
  else at::vec::convert_from_float<T>(v, v).store(p, n);
}

// Whether this build stores Vectorized<T> non-temporally: every floating type
// (float, double, and half and bfloat16, whose vectors are integer registers) under
// AVX2 and AVX-512; the DEFAULT build stores as usual whatever the caller asks.
template <typename T>
constexpr bool kStreamable =
#if defined(CPU_CAPABILITY_AVX2) || defined(CPU_CAPABILITY_AVX512)
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, c10::Half> ||
    std::is_same_v<T, c10::BFloat16>;
#else
    false;
#endif

// Stores v at p (aligned to the vector's size) past the caches.
template <typename T>
void store_streaming(const Vectorized<T>& v, T* p) {
#if defined(CPU_CAPABILITY_AVX512)
  if constexpr (std::is_same_v<T, float>) _mm512_stream_ps(p, v);
  else if constexpr (std::is_same_v<T, double>) _mm512_stream_pd(p, v);
  else _mm512_stream_si512(reinterpret_cast<__m512i*>(p), v);
#elif defined(CPU_CAPABILITY_AVX2)
  if constexpr (std::is_same_v<T, float>) _mm256_stream_ps(p, v);
  else if constexpr (std::is_same_v<T, double>) _mm256_stream_pd(p, v);
  else _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v);
#else
  v.store(p);
#endif
}

// f applied to one vector of T as at::vec::map applies it where half types have
// vectors of their own (AVX2, AVX-512): directly when f takes Vectorized<T> (float,
// double, or a generic lambda), else through two float vectors.
template <typename T, typename F>
Vectorized<T> apply_vec(const F& f, const Vectorized<T>& a) {
  if constexpr (std::is_invocable_v<F, Vectorized<T>>) {
    return f(a);
  } else {
    const auto [a0, a1] = at::vec::convert_to_float<T>(a);
    return at::vec::convert_from_float<T>(f(a0), f(a1));
  }
}
template <typename T, typename F>
Vectorized<T> apply_vec(const F& f, const Vectorized<T>& a, const Vectorized<T>& b) {
  if constexpr (std::is_invocable_v<F, Vectorized<T>, Vectorized<T>>) {
    return f(a, b);
  } else {
    const auto [a0, a1] = at::vec::convert_to_float<T>(a);
    const auto [b0, b1] = at::vec::convert_to_float<T>(b);
    return at::vec::convert_from_float<T>(f(a0, b0), f(a1, b1));
  }
}

// Orders this thread's non-temporal stores before what it does next.
inline void streaming_fence() {
#if defined(CPU_CAPABILITY_AVX2) || defined(CPU_CAPABILITY_AVX512)
  _mm_sfence();
#endif
}

// How many elements of T lie before p's first vector-aligned address.
template <typename T>
int64_t unaligned_head(const T* p) {
  constexpr auto kBytes = static_cast<uintptr_t>(sizeof(Vectorized<T>));
  return static_cast<int64_t>((kBytes - reinterpret_cast<uintptr_t>(p) % kBytes) % kBytes / sizeof(T));
}

// out[i] = f(in[i]…) over n elements with non-temporal stores: the few elements
// before out's first aligned vector and the tail after its last go through
// at::vec::map (one input) or map2 (two); the sfence orders the weakly ordered
// non-temporal stores before the thread reports its chunk done.
template <typename T, typename F, typename... In>
void map_streaming(const F& f, T* out, int64_t n, const In*... in) {
  static_assert(sizeof...(In) == 1 || sizeof...(In) == 2);
  using V = Vectorized<T>;
  const auto plain = [&](int64_t i, int64_t m) {
    if constexpr (sizeof...(In) == 1) at::vec::map(f, out + i, (in + i)..., m);
    else at::vec::map2(f, out + i, (in + i)..., m);
  };
  const int64_t head = std::min(n, unaligned_head(out));
  plain(0, head);
  int64_t i = head;
  for (; i + V::size() <= n; i += V::size()) store_streaming(apply_vec(f, V::loadu(in + i)...), out + i);
  plain(i, n - i);
  streaming_fence();
}

// at::vec::map (out[i] = f(in[i])) with the stores the caller chose.
template <typename T, typename F>
void map_to(const F& f, T* out, const T* in, int64_t n, Stores stores) {
  if constexpr (kStreamable<T>) {
    if (stores == Stores::kStreaming) return map_streaming(f, out, n, in);
  }
  at::vec::map(f, out, in, n);
}

// at::vec::map2 (out[i] = f(a[i], b[i])) with the stores the caller chose.
template <typename T, typename F>
void map2_to(const F& f, T* out, const T* a, const T* b, int64_t n, Stores stores) {
  if constexpr (kStreamable<T>) {
    if (stores == Stores::kStreaming) return map_streaming(f, out, n, a, b);
  }
  at::vec::map2(f, out, a, b, n);
}

}  // namespace
}  // namespace kiln::ops::cpu::KILN_CPU_NS
