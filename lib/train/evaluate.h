// Loss and accuracy of a classifier over a whole data set, in eval mode and
// without autograd.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>

namespace kiln::train {

struct EvalResult {
  double loss = 0.0;      // mean cross-entropy over all examples
  double accuracy = 0.0;  // fraction in 0..1
  int64_t examples = 0;
};

/// forward: (B, …) → logits (B, C). Example: evaluate(fwd, x_test, y_test, 1000, device)
EvalResult evaluate(const std::function<at::Tensor(const at::Tensor&)>& forward,
                    const at::Tensor& x, const at::Tensor& y, int64_t batch_size,
                    const at::Device& device);

}  // namespace kiln::train
