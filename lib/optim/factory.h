// Builds a kiln optimizer by name ("adamw", "sgd", "lion", "muon") from one
// torch-style spec, so a config's [optim] section picks the optimizer.
#pragma once
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>

#include <memory>
#include <string>

#include "optim/spec.h"

namespace kiln::optim {

/// Builds spec.name over the model's parameters (one group; Muon splits them with
/// muon_param_groups), each unset field at the optimizer's own default. An unknown
/// name or an invalid value throws kiln::InputError
/// ("optim.name: expected one of adamw, sgd, lion, muon, found \"adam\"").
/// Example: auto opt = kiln::optim::make_optimizer(spec, model->named_parameters());
std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const OptimizerSpec& spec,
    const torch::OrderedDict<std::string, torch::Tensor>& named_parameters);

}  // namespace kiln::optim
