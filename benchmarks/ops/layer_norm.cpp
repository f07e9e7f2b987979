// layer_norm over rows of 192 (the GPT's width) against ATen's: float32 in and out
// ("fwd", "bwd": native_layer_norm and its backward), and float32 normalised into
// bfloat16 as the GPT does under CPU autocast ("bf16-fwd": ATen's then a cast;
// "bf16-bwd": a bfloat16 grad, which ATen's backward takes after a cast to float32).
// float32 on the CPU only; n sets the rows, n / 192.
#include <ATen/ops/native_layer_norm.h>
#include <ATen/ops/native_layer_norm_backward.h>

#include <algorithm>

#include "cases.h"
#include "ops/ops.h"

KILN_BENCH_CASES(layer_norm) {
  if (options.dtype() != at::kFloat || !options.device().is_cpu()) return {};
  constexpr int64_t kWidth = 192;
  const int64_t rows = std::max<int64_t>(1, n / kWidth);
  const auto x = at::randn({rows, kWidth}, options), w = at::rand({kWidth}, options) + 0.5,
             b = at::randn({kWidth}, options), g = at::randn({rows, kWidth}, options);
  const auto gb = g.to(at::kBFloat16);
  const auto [y, mean, rstd] = kiln::ops::layer_norm_forward(x, w, b, 1e-5);
  const auto [ay, amean, arstd] = at::native_layer_norm(x, {kWidth}, w, b, 1e-5);
  const std::array<bool, 3> all = {true, true, true};
  return {
      {"layer_norm", "fwd", [=] { kiln::ops::layer_norm_forward(x, w, b, 1e-5); },
       [=] { at::native_layer_norm(x, {kWidth}, w, b, 1e-5); }},
      {"layer_norm", "bwd", [=] { kiln::ops::layer_norm_backward(g, x, w, mean, rstd, all); },
       [=] { at::native_layer_norm_backward(g, x, {kWidth}, amean, arstd, w, b, all); }},
      {"layer_norm", "bf16-fwd", [=] { kiln::ops::layer_norm_forward(x, w, b, 1e-5, at::kBFloat16); },
       [=] { std::get<0>(at::native_layer_norm(x, {kWidth}, w, b, 1e-5)).to(at::kBFloat16); }},
      {"layer_norm", "bf16-bwd", [=] { kiln::ops::layer_norm_backward(gb, x, w, mean, rstd, all); },
       [=] { at::native_layer_norm_backward(gb.to(at::kFloat), x, {kWidth}, amean, arstd, w, b, all); }},
  };
}
