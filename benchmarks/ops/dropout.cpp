// dropout against ATen's native_dropout (forward: the output and a bool mask, what
// autograd's dropout keeps) and native_dropout_backward (backward: grad·mask·scale),
// and the two in a row ("fwd+bwd"): kiln's backward draws the mask again from the
// seed instead of reading one.
#include <ATen/ops/native_dropout.h>
#include <ATen/ops/native_dropout_backward.h>

#include "cases.h"
#include "ops/ops.h"

KILN_BENCH_CASES(dropout) {
  constexpr double kP = 0.1;
  const auto x = at::randn({n}, options), g = at::randn({n}, options);
  const auto mask = std::get<1>(at::native_dropout(x, kP, true));
  const double bytes = static_cast<double>(x.element_size()) * n;  // one tensor
  const double mask_bytes = static_cast<double>(n);                 // ATen's bool mask
  constexpr double kScale = 1.0 / (1.0 - kP);
  return {
      {"dropout", "fwd", [=] { kiln::ops::dropout(x, kP, 17); }, [=] { at::native_dropout(x, kP, true); },
       2 * bytes, {}, 2 * bytes + mask_bytes},
      {"dropout", "bwd", [=] { kiln::ops::dropout(g, kP, 17); },
       [=] { at::native_dropout_backward(g, mask, kScale); }, 2 * bytes, {}, 2 * bytes + mask_bytes},
      {"dropout", "fwd+bwd",
       [=] {
         kiln::ops::dropout(x, kP, 17);
         kiln::ops::dropout(g, kP, 17);
       },
       [=] {
         const auto m = std::get<1>(at::native_dropout(x, kP, true));
         at::native_dropout_backward(g, m, kScale);
       },
       4 * bytes, {}, 4 * bytes + 2 * mask_bytes},
  };
}
