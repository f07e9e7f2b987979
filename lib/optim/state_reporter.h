// The one question a caller may ask about an optimizer's state: which tensors it
// holds. Each kiln optimizer answers it, so memory reports ask the optimizer
// instead of keeping a table of state types.
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

namespace kiln::optim {

/// Implemented by every kiln optimizer beside torch::optim::Optimizer.
/// Example: if (auto* r = dynamic_cast<const StateReporter*>(&opt)) bytes = storage_bytes(r->state_tensors());
class StateReporter {
 public:
  virtual ~StateReporter() = default;
  /// Every defined tensor of every parameter's state, an inner optimizer's
  /// included (not the parameters or their gradients).
  virtual std::vector<at::Tensor> state_tensors() const = 0;
};

}  // namespace kiln::optim
