// The checks kiln::batch_norm's CPU and Meta kernels share, and the layout of its input.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <array>
#include <cmath>
#include <tuple>
#include <string_view>

#include "batch_norm_kernel.h"

namespace kiln::ops {

/// x (N, C, *) float32, bfloat16 or float16 with C > 0; weight, bias and the two
/// statistics (C) float32 on x's device (the statistics may be undefined; `stats` names
/// them in messages: the running ones, or the backward's saved mean and invstd); eps ≥ 0
/// and momentum in [0, 1], finite.
inline void check_batch_norm(std::string_view op, const at::Tensor& x, const at::Tensor& weight,
                             const at::Tensor& bias, const at::Tensor& running_mean,
                             const at::Tensor& running_var, double momentum, double eps,
                             std::array<const char*, 2> stats = {"running_mean", "running_var"}) {
  TORCH_CHECK(x.defined(), op, ": x: expected a tensor, got an undefined one");
  TORCH_CHECK(x.dim() >= 2, op, ": x: expected (N, C, ...) with at least 2 dimensions, got shape ", x.sizes());
  const auto dt = x.scalar_type();
  TORCH_CHECK(dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf, op,
              ": x: expected dtype Float, BFloat16 or Half, got ", dt);
  const int64_t c = x.size(1);
  TORCH_CHECK(c > 0, op, ": x: expected C = x.size(1) > 0, got shape ", x.sizes());
  for (const auto& [name, t, optional] :
       {std::tuple<const char*, const at::Tensor*, bool>{"weight", &weight, false}, {"bias", &bias, false},
        {stats[0], &running_mean, true}, {stats[1], &running_var, true}}) {
    if (!t->defined() && optional) continue;
    TORCH_CHECK(t->defined(), op, ": ", name, ": expected a tensor of shape [", c, "], got an undefined one");
    TORCH_CHECK(t->dim() == 1 && t->size(0) == c, op, ": ", name, ": expected shape [", c,
                "] (x's channels), got ", t->sizes());
    TORCH_CHECK(t->scalar_type() == at::kFloat, op, ": ", name, ": expected dtype Float, got ", t->scalar_type());
    TORCH_CHECK(t->device() == x.device(), op, ": ", name, ": expected device ", x.device(), " (x's), got ",
                t->device());
  }
  TORCH_CHECK(std::isfinite(eps) && eps >= 0.0, op, ": eps: expected a finite number >= 0, got ", eps);
  TORCH_CHECK(std::isfinite(momentum) && momentum >= 0.0 && momentum <= 1.0, op,
              ": momentum: expected a number in [0, 1], got ", momentum);
}

/// x's elements per channel (N·S).
inline int64_t batch_norm_count(const at::Tensor& x) { return x.numel() / x.size(1); }

/// The memory format batch norm runs x in: channels last where x is (for 4-D and
/// 5-D x), else contiguous (N, C, *).
inline at::MemoryFormat batch_norm_format(const at::Tensor& x) {
  if (x.dim() == 4 && !x.is_contiguous() && x.is_contiguous(at::MemoryFormat::ChannelsLast))
    return at::MemoryFormat::ChannelsLast;
  if (x.dim() == 5 && !x.is_contiguous() && x.is_contiguous(at::MemoryFormat::ChannelsLast3d))
    return at::MemoryFormat::ChannelsLast3d;
  return at::MemoryFormat::Contiguous;
}

/// The kernels' layout of x in that format: rows of C for channels last, and for a
/// contiguous x with one element per plane ((N, C) or 1×1 images); else planes.
inline cpu::BatchNormLayout batch_norm_layout(const at::Tensor& x, at::MemoryFormat format) {
  cpu::BatchNormLayout l;
  l.c = x.size(1);
  l.s = x.size(0) == 0 ? 0 : x.numel() / (x.size(0) * l.c);
  l.rows = format != at::MemoryFormat::Contiguous || l.s == 1;
  return l;
}

}  // namespace kiln::ops
