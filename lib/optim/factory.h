// Builds a kiln optimizer by name ("adamw", "sgd", "lion", "muon") from one
// torch-style spec, so a config's [optim] section picks the optimizer.
#pragma once
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::optim {

/// What a config says about the optimizer. An unset optional takes the chosen
/// optimizer's own default (listed per field).
struct OptimizerSpec {
  std::string name = "adamw";
  double lr = 1e-3;
  /// Decoupled for adamw, lion, muon; an L2 term in the gradient for sgd (as torch's SGD).
  double weight_decay = 0.0;
  std::optional<double> beta1;     // adamw 0.9, lion 0.9, muon's AdamW group 0.9
  std::optional<double> beta2;     // adamw 0.999, lion 0.99, muon's AdamW group 0.999
  double eps = 1e-8;               // adamw and muon's AdamW group
  std::optional<double> momentum;  // sgd 0.9, muon 0.95
  std::optional<bool> nesterov;    // sgd false, muon true
  double dampening = 0.0;          // sgd
  int64_t ns_steps = 5;            // muon: Newton–Schulz iterations
  double muon_adamw_lr = 3e-4;     // muon: lr of the AdamW group (non-matrices, excluded names)
  /// muon: parameters whose name contains one of these go to the AdamW group.
  std::vector<std::string> muon_exclude = {"embed", "head"};
};

/// The names make_optimizer knows, in order: adamw, sgd, lion, muon.
const std::vector<std::string>& optimizer_names();

/// Builds spec.name over the model's parameters (one group; Muon splits them with
/// muon_param_groups). An unknown name or an invalid value throws kiln::InputError
/// ("optim.name: expected one of adamw, sgd, lion, muon, found \"adam\"").
/// Example: auto opt = kiln::optim::make_optimizer(spec, model->named_parameters());
std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const OptimizerSpec& spec,
    const torch::OrderedDict<std::string, torch::Tensor>& named_parameters);

}  // namespace kiln::optim
