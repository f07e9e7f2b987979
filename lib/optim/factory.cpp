// make_optimizer: the one place that maps an optimizer name and a spec to a
// constructed kiln optimizer, turning invalid values into kiln::InputError; and
// resolve_defaults, which reads each unset field's default from the optimizer's
// own Options, so no default is written here.
#include "optim/factory.h"

#include <algorithm>

#include "optim/adamw.h"
#include "optim/lion.h"
#include "optim/muon.h"
#include "optim/sgd.h"
#include "util/error.h"

namespace kiln::optim {
namespace {

template <class T, class U>
void fill(std::optional<T>& field, const U& value) {
  if (!field) field = value;
}

void check_name(const std::string& name) {
  const auto& names = optimizer_names();
  if (std::find(names.begin(), names.end(), name) != names.end()) return;
  std::string valid;
  for (const auto& n : names) valid += (valid.empty() ? "" : ", ") + n;
  throw InputError("optim.name: expected one of " + valid + ", found \"" + name + "\"");
}

// `r` has every field its optimizer reads (resolve_defaults).
std::unique_ptr<torch::optim::Optimizer> build(
    const OptimizerSpec& r, const torch::OrderedDict<std::string, torch::Tensor>& named) {
  const auto params = named.values();
  if (r.name == "adamw")
    return std::make_unique<AdamW>(params, AdamWOptions(*r.lr)
                                               .beta1(*r.beta1)
                                               .beta2(*r.beta2)
                                               .eps(*r.eps)
                                               .weight_decay(*r.weight_decay));
  if (r.name == "sgd")
    return std::make_unique<SGD>(params, SGDOptions(*r.lr)
                                             .momentum(*r.momentum)
                                             .dampening(*r.dampening)
                                             .nesterov(*r.nesterov)
                                             .weight_decay(*r.weight_decay));
  if (r.name == "lion")
    return std::make_unique<Lion>(
        params, LionOptions(*r.lr).beta1(*r.beta1).beta2(*r.beta2).weight_decay(*r.weight_decay));
  // muon
  const auto muon = MuonOptions(*r.lr)
                        .momentum(*r.momentum)
                        .nesterov(*r.nesterov)
                        .ns_steps(*r.ns_steps)
                        .weight_decay(*r.weight_decay);
  const auto adamw = muon_adamw_group_defaults()
                         .lr(*r.muon_adamw_lr)
                         .beta1(*r.beta1)
                         .beta2(*r.beta2)
                         .eps(*r.eps)
                         .weight_decay(*r.weight_decay);
  return std::make_unique<Muon>(muon_param_groups(named, r.muon_exclude, muon, adamw), muon);
}

}  // namespace

const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> names = {"adamw", "sgd", "lion", "muon"};
  return names;
}

OptimizerSpec resolve_defaults(OptimizerSpec s) {
  check_name(s.name);
  if (s.name == "adamw") {
    const AdamWOptions d;
    fill(s.lr, d.lr()), fill(s.weight_decay, d.weight_decay());
    fill(s.beta1, d.beta1()), fill(s.beta2, d.beta2()), fill(s.eps, d.eps());
  } else if (s.name == "sgd") {
    const SGDOptions d;
    fill(s.lr, d.lr()), fill(s.weight_decay, d.weight_decay());
    fill(s.momentum, d.momentum()), fill(s.nesterov, d.nesterov());
    fill(s.dampening, d.dampening());
  } else if (s.name == "lion") {
    const LionOptions d;
    fill(s.lr, d.lr()), fill(s.weight_decay, d.weight_decay());
    fill(s.beta1, d.beta1()), fill(s.beta2, d.beta2());
  } else {  // muon: one weight decay for both groups, the moments for its AdamW group
    const MuonOptions d;
    const auto a = muon_adamw_group_defaults();
    fill(s.lr, d.lr()), fill(s.weight_decay, d.weight_decay());
    fill(s.momentum, d.momentum()), fill(s.nesterov, d.nesterov()), fill(s.ns_steps, d.ns_steps());
    fill(s.muon_adamw_lr, a.lr());
    fill(s.beta1, a.beta1()), fill(s.beta2, a.beta2()), fill(s.eps, a.eps());
  }
  return s;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const OptimizerSpec& spec, const torch::OrderedDict<std::string, torch::Tensor>& named) {
  const auto resolved = resolve_defaults(spec);
  try {
    return build(resolved, named);
  } catch (const c10::Error& e) {  // an option out of range, from the constructor's checks
    throw InputError("optim: " + std::string(e.what_without_backtrace()));
  }
}

}  // namespace kiln::optim
