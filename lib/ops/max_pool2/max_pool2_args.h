// The checks kiln::max_pool2's CPU and Meta kernels share, and the shape of a call.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <string_view>

#include "max_pool2_kernel.h"

namespace kiln::ops {

/// The memory format max_pool2 runs x in: channels last where x is (and is not also
/// contiguous), else contiguous (NCHW).
inline bool max_pool2_channels_last(const at::Tensor& x) {
  return !x.is_contiguous() && x.is_contiguous(at::MemoryFormat::ChannelsLast);
}

/// x: (N, C, H, W) float32, bfloat16 or float16 with H, W ≥ 2.
inline cpu::PoolShape max_pool2_shape(std::string_view op, const at::Tensor& x, bool channels_last) {
  TORCH_CHECK(x.defined(), op, ": x: expected a tensor, got an undefined one");
  TORCH_CHECK(x.dim() == 4, op, ": x: expected a 4-D tensor (N, C, H, W), got shape ", x.sizes());
  const auto dt = x.scalar_type();
  TORCH_CHECK(dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf, op,
              ": x: expected dtype Float, BFloat16 or Half, got ", dt);
  TORCH_CHECK(x.size(2) >= 2 && x.size(3) >= 2, op,
              ": x: expected H and W of at least 2 (one 2x2 window), got shape ", x.sizes());
  return {x.size(0), x.size(1), x.size(2), x.size(3), channels_last};
}

/// The backward's shape from input_size, with grad and code (N, C, H/2, W/2) checked.
inline cpu::PoolShape max_pool2_backward_shape(std::string_view op, const at::Tensor& grad, const at::Tensor& code,
                                               at::IntArrayRef input_size, bool channels_last) {
  TORCH_CHECK(input_size.size() == 4, op, ": input_size: expected (N, C, H, W), got ", input_size);
  TORCH_CHECK(input_size[2] >= 2 && input_size[3] >= 2, op, ": input_size: expected H and W of at least 2, got ",
              input_size);
  const std::vector<int64_t> out = {input_size[0], input_size[1], input_size[2] / 2, input_size[3] / 2};
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"grad", &grad}, {"code", &code}}) {
    TORCH_CHECK(t->defined() && t->sizes() == at::IntArrayRef(out), op, ": ", name, ": expected shape ",
                at::IntArrayRef(out), ", got ", t->defined() ? t->sizes() : at::IntArrayRef{});
  }
  const auto dt = grad.scalar_type();
  TORCH_CHECK(dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf, op,
              ": grad: expected dtype Float, BFloat16 or Half, got ", dt);
  TORCH_CHECK(code.scalar_type() == at::kByte, op, ": code: expected dtype Byte (the forward's), got ",
              code.scalar_type());
  TORCH_CHECK(code.device() == grad.device(), op, ": code: expected device ", grad.device(), ", got ", code.device());
  return {input_size[0], input_size[1], input_size[2], input_size[3], channels_last};
}

inline at::MemoryFormat max_pool2_format(bool channels_last) {
  return channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
}

}  // namespace kiln::ops
