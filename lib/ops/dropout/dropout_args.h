// The argument check and the constants every dropout backend shares: an element is
// kept when its 32-bit Philox word is below `keep_below` (probability 1 − p to within
// 2^-32) and then scaled by 1/(1 − p); a dropped one becomes x·0 (NaN and ±inf give
// NaN, as ATen's x·mask·scale does).
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <cstdint>
#include <string_view>

#include "../op_support.h"

namespace kiln::ops {

struct DropoutConstants {
  uint32_t keep_below = 0;  // keep where word < keep_below
  double scale = 1.0;       // 1/(1 − p) for the kept
};

/// Checks p ∈ [0, 1] and gives the kernels' constants; p = 0 is the caller's (a copy:
/// keep_below cannot say "every word"). Example: auto k = dropout_constants("kiln::dropout", 0.1);
inline DropoutConstants dropout_constants(std::string_view op, double p) {
  TORCH_CHECK(p >= 0.0 && p <= 1.0, op, ": p: expected a probability in [0, 1], got ", p);
  DropoutConstants k;
  const double keep = std::nearbyint((1.0 - p) * 4294967296.0);
  k.keep_below = keep >= 4294967295.0 ? 0xFFFFFFFFu : static_cast<uint32_t>(keep);
  k.scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
  return k;
}

/// What every backend of kiln::dropout starts from: p and x checked, the constants, and
/// x contiguous (the mask follows the row-major index, so a backward's gradient in
/// another layout draws the same mask). Example: auto [k, xc] = dropout_call(x, p);
struct DropoutCall {
  DropoutConstants k;
  at::Tensor x;
};
inline DropoutCall dropout_call(const at::Tensor& x, double p) {
  auto k = dropout_constants("kiln::dropout", p);
  check_floating("kiln::dropout", "x", x);
  return {k, x.contiguous()};
}

}  // namespace kiln::ops
