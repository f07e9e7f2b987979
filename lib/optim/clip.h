// Clipping by the global gradient norm: the norm of all gradients together in
// one fused pass (kiln::ops::grad_norm), then one in-place scaling pass.
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

namespace kiln::optim {

/// Scales every defined gradient by min(1, max_norm / (norm + 1e-6)), where norm is
/// the 2-norm of all gradients together, and returns that norm (before clipping) as
/// a 0-dim tensor on the gradients' device (float32; float64 if any gradient is).
/// Nothing waits for the device. A non-finite norm is returned as is (the gradients
/// then become non-finite too, as with torch::nn::utils::clip_grad_norm_; the
/// caller decides whether to skip the step). No gradients: returns 0.
/// Example: const double norm = kiln::optim::clip_grad_norm(model->parameters(), 1.0).item<double>();
at::Tensor clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm);

}  // namespace kiln::optim
