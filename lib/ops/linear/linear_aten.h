// The Tensor-level pieces of kiln::linear that every backend shares: the argument
// checks, and the ATen formulation (addmm / mm) that is the CPU kernel, CUDA's
// float64 path and CUDA's fallback when cuBLASLt's fused epilogue cannot be used.
#pragma once
#include <ATen/core/Tensor.h>

#include <array>
#include <optional>
#include <string_view>
#include <tuple>

namespace kiln::ops::linear {

/// Throws unless x: (B, K), w: (N, K), b: (N) or none, all floating, of one dtype
/// and device. Example: check_forward("kiln::linear", x, w, b);
void check_forward(std::string_view op, const at::Tensor& x, const at::Tensor& w,
                   const std::optional<at::Tensor>& b);

/// Throws unless grad: (B, N) for x: (B, K) and w: (N, K), of one dtype and device.
void check_backward(std::string_view op, const at::Tensor& grad, const at::Tensor& x,
                    const at::Tensor& w);

/// z = x·wᵀ + b as at::addmm (at::mm without bias); z: (B, N), contiguous.
at::Tensor forward_aten(const at::Tensor& x, const at::Tensor& w,
                        const std::optional<at::Tensor>& b);

/// relu(x·wᵀ + b): forward_aten's product with the ReLU applied in place (NaN kept).
at::Tensor relu_aten(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b);

/// (gelu_tanh(z), z) with z = forward_aten(x, w, b).
std::tuple<at::Tensor, at::Tensor> gelu_forward_aten(const at::Tensor& x, const at::Tensor& w,
                                                     const std::optional<at::Tensor>& b);

/// gelu_tanh(x·wᵀ + b), the GELU applied in place on the pre-activation (nothing kept).
at::Tensor gelu_aten(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b);

/// (dx, dw, db) = (grad·w, gradᵀ·x, grad.sum(0)), each only where output_mask asks.
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_aten(const at::Tensor& grad,
                                                             const at::Tensor& x,
                                                             const at::Tensor& w,
                                                             std::array<bool, 3> output_mask);

}  // namespace kiln::ops::linear
