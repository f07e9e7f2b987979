// clip_grad_norm: gradients grouped by dtype (kiln::ops::grad_norm takes one
// dtype per call; usually there is one group), their norms combined on the
// device, and the clip factor applied with at::_foreach_mul_.
#include "optim/clip.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <map>

#include "ops/ops.h"

namespace kiln::optim {

at::Tensor clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm) {
  TORCH_CHECK(max_norm > 0, "clip_grad_norm: max_norm: expected > 0, got ", max_norm);
  torch::NoGradGuard no_grad;
  std::map<at::ScalarType, std::vector<at::Tensor>> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads[p.grad().scalar_type()].push_back(p.grad());
  if (grads.empty()) return at::zeros({}, at::kFloat);
  at::Tensor norm;
  if (grads.size() == 1) {
    norm = kiln::ops::grad_norm(grads.begin()->second);
  } else {  // √(Σ_dtype norm²), computed in float64, returned as grad_norm would
    std::vector<at::Tensor> norms;
    for (auto& [dtype, list] : grads) norms.push_back(kiln::ops::grad_norm(list).to(at::kDouble));
    norm = at::stack(norms).square().sum().sqrt().to(grads.count(at::kDouble) ? at::kDouble
                                                                              : at::kFloat);
  }
  // min(1, max_norm/(norm + 1e-6)) as a device tensor: no host sync.
  const auto coef = (max_norm / (norm + 1e-6)).clamp_max(1.0);
  for (auto& [dtype, list] : grads) at::_foreach_mul_(list, coef.to(dtype));
  return norm;
}

}  // namespace kiln::optim
