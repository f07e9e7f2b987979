// make_optimizer: the one place that maps an optimizer name and a spec to a
// constructed kiln optimizer, turning invalid values into kiln::InputError.
#include "optim/factory.h"

#include "optim/adamw.h"
#include "optim/lion.h"
#include "optim/muon.h"
#include "optim/sgd.h"
#include "util/error.h"

namespace kiln::optim {
namespace {

std::unique_ptr<torch::optim::Optimizer> build(
    const OptimizerSpec& s, const torch::OrderedDict<std::string, torch::Tensor>& named) {
  const auto params = named.values();
  if (s.name == "adamw")
    return std::make_unique<AdamW>(params, AdamWOptions(s.lr)
                                               .beta1(s.beta1.value_or(0.9))
                                               .beta2(s.beta2.value_or(0.999))
                                               .eps(s.eps)
                                               .weight_decay(s.weight_decay));
  if (s.name == "sgd")
    return std::make_unique<SGD>(params, SGDOptions(s.lr)
                                             .momentum(s.momentum.value_or(0.9))
                                             .dampening(s.dampening)
                                             .nesterov(s.nesterov.value_or(false))
                                             .weight_decay(s.weight_decay));
  if (s.name == "lion")
    return std::make_unique<Lion>(params, LionOptions(s.lr)
                                              .beta1(s.beta1.value_or(0.9))
                                              .beta2(s.beta2.value_or(0.99))
                                              .weight_decay(s.weight_decay));
  // muon
  const auto muon = MuonOptions(s.lr)
                        .momentum(s.momentum.value_or(0.95))
                        .nesterov(s.nesterov.value_or(true))
                        .ns_steps(s.ns_steps)
                        .weight_decay(s.weight_decay);
  const auto adamw = MuonOptions(s.muon_adamw_lr)
                         .beta1(s.beta1.value_or(0.9))
                         .beta2(s.beta2.value_or(0.999))
                         .eps(s.eps)
                         .weight_decay(s.weight_decay);
  return std::make_unique<Muon>(muon_param_groups(named, s.muon_exclude, muon, adamw), muon);
}

}  // namespace

const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> names = {"adamw", "sgd", "lion", "muon"};
  return names;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const OptimizerSpec& spec, const torch::OrderedDict<std::string, torch::Tensor>& named) {
  const auto& names = optimizer_names();
  if (std::find(names.begin(), names.end(), spec.name) == names.end()) {
    std::string valid;
    for (const auto& n : names) valid += (valid.empty() ? "" : ", ") + n;
    throw InputError("optim.name: expected one of " + valid + ", found \"" + spec.name + "\"");
  }
  try {
    return build(spec, named);
  } catch (const c10::Error& e) {  // an option out of range, from the constructor's checks
    throw InputError("optim: " + std::string(e.what_without_backtrace()));
  }
}

}  // namespace kiln::optim
