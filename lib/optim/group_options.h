// A fix-up every kiln optimizer's constructor applies: recent libtorch's
// Optimizer::add_param_group merges a group's own options only for libtorch's
// own optimizer types and gives any other type the defaults, silently dropping
// (say) a group's learning rate. kiln restores the options each group was given.
#pragma once
#include <torch/optim/optimizer.h>

namespace kiln::optim {

/// Example (in a constructor): restore_group_options(*this, param_groups);
inline void restore_group_options(torch::optim::Optimizer& optimizer,
                                  const std::vector<torch::optim::OptimizerParamGroup>& given) {
  auto& groups = optimizer.param_groups();
  TORCH_INTERNAL_ASSERT(groups.size() == given.size());
  for (size_t g = 0; g < given.size(); ++g)
    if (given[g].has_options()) groups[g].set_options(given[g].options().clone());
}

}  // namespace kiln::optim
