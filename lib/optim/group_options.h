// What every kiln optimizer's constructor and step() share. A fix-up every kiln
// optimizer's constructor applies: recent libtorch's
// Optimizer::add_param_group merges a group's own options only for libtorch's
// own optimizer types and gives any other type the defaults, silently dropping
// (say) a group's learning rate. kiln restores the options each group was given.
#pragma once
#include <ATen/core/grad_mode.h>
#include <c10/util/StringUtil.h>
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

/// Restores the groups' own options (above), then checks the defaults and every
/// group's options with check(options, "Name: " or "Name: group g: ").
/// Example: setup_groups<SGDOptions>(*this, param_groups, defaults, "SGD", check_options);
template <class Options, class Check>
void setup_groups(torch::optim::Optimizer& optimizer,
                  const std::vector<torch::optim::OptimizerParamGroup>& given,
                  const Options& defaults, const char* name, Check&& check) {
  restore_group_options(optimizer, given);
  check(defaults, c10::str(name, ": "));
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g)
    check(static_cast<const Options&>(groups[g].options()), c10::str(name, ": group ", g, ": "));
}

/// The loss of step()'s closure, evaluated with grad on (an undefined tensor without one).
inline torch::Tensor run_closure(const torch::optim::Optimizer::LossClosure& closure) {
  if (!closure) return {};
  at::AutoGradMode enable_grad(true);
  return closure();
}

}  // namespace kiln::optim
