// The bias pass after a float32 product on the CPU, on raw pointers; compiled once per
// CPU capability. The library's product writes z = x·wᵀ without its bias (at::mm);
// this pass adds the bias and applies relu, or writes gelu(z) beside z, while z's rows
// are in cache: at::addmm would copy the bias into every row of z first and then add
// the product into it (a pass more over z, and a product that reads z), and the
// activation would be a pass of its own (linear_aten.cpp).
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include "../cpu_exp.h"
#include "../cpu_vec.h"
#include "../gelu/gelu_math.h"
#include "linear_kernel.h"

namespace kiln::ops::cpu::KILN_CPU_NS {
namespace {

using V = at::vec::Vectorized<float>;

// kiln::gelu's exp (gelu_cpu_kernel.cpp): the same arithmetic as its forward, bit for bit.
constexpr auto kExp = [](auto v) { return exp_capped(v, gelu_math::kExpCap); };

// One vector of a row: count < V::size() for the row's tail.
template <BiasEpilogue E, bool kStream>
inline void one(const float* b, float* z, float* y, int64_t count) {
  const bool full = count == V::size();
  V v = (full ? V::loadu(z) : V::loadu(z, static_cast<int>(count))) +
        (full ? V::loadu(b) : V::loadu(b, static_cast<int>(count)));
  if constexpr (E == BiasEpilogue::kBiasRelu) v = at::vec::clamp_min(v, V(0));
  if constexpr (E == BiasEpilogue::kBiasGelu) {
    if (y != z) full ? v.store(z) : v.store(z, static_cast<int>(count));
    const V g = gelu_math::forward(v, kExp);
    if (kStream && full) store_streaming(g, y);
    else full ? g.store(y) : g.store(y, static_cast<int>(count));
  } else {
    full ? v.store(z) : v.store(z, static_cast<int>(count));
  }
}

template <BiasEpilogue E>
void rows(const float* b, float* z, float* y, int64_t r0, int64_t r1, int64_t n, Stores stores) {
  bool streamed = false;
  for (int64_t r = r0; r < r1; ++r) {
    float* zr = z + r * n;
    float* yr = E == BiasEpilogue::kBiasGelu ? y + r * n : zr;
    // Streaming stores want y's row on a vector boundary (rows of a multiple of 16
    // floats from an aligned base, as the GPT's are); other rows are stored plainly.
    const bool stream = E == BiasEpilogue::kBiasGelu && stores == Stores::kStreaming && yr != zr &&
                        unaligned_head(yr) == 0;
    streamed |= stream;
    int64_t j = 0;
    if (stream) {
      for (; j + V::size() <= n; j += V::size()) one<E, true>(b + j, zr + j, yr + j, V::size());
    } else {
      for (; j + V::size() <= n; j += V::size()) one<E, false>(b + j, zr + j, yr + j, V::size());
    }
    if (j < n) one<E, false>(b + j, zr + j, yr + j, n - j);
  }
  if (streamed) streaming_fence();
}

}  // namespace

void bias_epilogue(BiasEpilogue e, const float* b, float* z, float* y, int64_t r0, int64_t r1, int64_t n,
                   Stores stores) {
  switch (e) {
    case BiasEpilogue::kBias: return rows<BiasEpilogue::kBias>(b, z, y, r0, r1, n, stores);
    case BiasEpilogue::kBiasRelu: return rows<BiasEpilogue::kBiasRelu>(b, z, y, r0, r1, n, stores);
    case BiasEpilogue::kBiasGelu: return rows<BiasEpilogue::kBiasGelu>(b, z, y, r0, r1, n, stores);
  }
}

}  // namespace kiln::ops::cpu::KILN_CPU_NS
