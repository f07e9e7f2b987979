// kiln::cast against ATen's cast (Tensor::to), in the two directions autocast takes
// every step: a float32 weight to bfloat16 in the forward ("fp32-bf16") and a
// bfloat16 gradient back to float32 in the backward ("bf16-fp32"). From float32 only,
// so each size runs once; on the CPU (on CUDA both sides are ATen's cast).
#include "cases.h"
#include "ops/ops.h"

KILN_BENCH_CASES(cast) {
  if (options.dtype() != at::kFloat || !options.device().is_cpu()) return {};
  const auto x = at::randn({n}, options);
  const auto h = x.to(at::kBFloat16);
  const double bytes = 6.0 * static_cast<double>(n);  // 4 read + 2 written, or 2 + 4
  return {
      {"cast", "fp32-bf16", [=] { kiln::ops::cast(x, at::kBFloat16); }, [=] { x.to(at::kBFloat16); }, bytes},
      {"cast", "bf16-fp32", [=] { kiln::ops::cast(h, at::kFloat); }, [=] { h.to(at::kFloat); }, bytes},
  };
}
