// at::vec helpers the vectorised CPU kernels (*_cpu_kernel.cpp) share: loading
// half types as float vectors.
// Include only from those files: it lives in the per-capability namespace
// KILN_CPU_NS, so each build gets its own copy.
#pragma once
#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <cstdint>
#include <type_traits>

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

}  // namespace
}  // namespace kiln::ops::cpu::KILN_CPU_NS
