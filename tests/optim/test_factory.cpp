// make_optimizer and resolve_defaults: an unset spec field is the chosen
// optimizer's own Options default (no other place writes one), a field it does not
// read stays unset, a set one wins, and Muon leaves the head a model names to AdamW.
#include <torch/torch.h>

#include "nn/factory.h"
#include "optim/factory.h"
#include "optim/lion.h"
#include "optim/muon.h"
#include "optim/sgd.h"
#include "support.h"
#include "util/error.h"

using kiln::optim::OptimizerSpec;

namespace {

OptimizerSpec named(const std::string& name) {
  OptimizerSpec s;
  s.name = name;
  return s;
}

template <class Options>
const Options& group_options(const torch::optim::Optimizer& opt, size_t g = 0) {
  return static_cast<const Options&>(opt.param_groups().at(g).options());
}

}  // namespace

TEST_CASE("resolve_defaults fills each field the optimizer reads from its own Options",
          "[optim][factory]") {
  const auto adamw = kiln::optim::resolve_defaults(named("adamw"));
  const kiln::optim::AdamWOptions a;
  REQUIRE(adamw.lr == a.lr());
  REQUIRE(adamw.weight_decay == a.weight_decay());
  REQUIRE(adamw.beta1 == 0.9);
  REQUIRE(adamw.beta2 == 0.999);
  REQUIRE(adamw.eps == 1e-8);
  REQUIRE_FALSE(adamw.momentum.has_value());  // adamw does not read it
  REQUIRE_FALSE(adamw.nesterov.has_value());

  const auto lion = kiln::optim::resolve_defaults(named("lion"));
  REQUIRE(lion.beta2 == 0.99);  // Lion's own, not AdamW's 0.999
  REQUIRE(lion.lr == kiln::optim::LionOptions().lr());
  REQUIRE_FALSE(lion.eps.has_value());

  const auto sgd = kiln::optim::resolve_defaults(named("sgd"));
  REQUIRE(sgd.nesterov == false);  // torch's default
  REQUIRE(sgd.momentum == 0.0);
  REQUIRE(sgd.lr == kiln::optim::SGDOptions().lr());
  REQUIRE_FALSE(sgd.beta1.has_value());

  const auto muon = kiln::optim::resolve_defaults(named("muon"));
  REQUIRE(muon.momentum == 0.95);
  REQUIRE(muon.nesterov == true);
  REQUIRE(muon.ns_steps == 5);
  REQUIRE(muon.muon_adamw_lr == kiln::optim::muon_adamw_group_defaults().lr());
  REQUIRE(muon.beta2 == 0.999);  // its AdamW group's

  auto set = named("lion");
  set.beta2 = 0.5;
  REQUIRE(kiln::optim::resolve_defaults(set).beta2 == 0.5);
  REQUIRE_THROWS_AS(kiln::optim::resolve_defaults(named("adam")), kiln::InputError);
}

TEST_CASE("make_optimizer with unset fields builds each optimizer at its Options defaults",
          "[optim][factory]") {
  torch::OrderedDict<std::string, torch::Tensor> params;
  params.insert("w", torch::randn({4, 3}).requires_grad_());
  params.insert("b", torch::randn({4}).requires_grad_());

  const auto lion = kiln::optim::make_optimizer(named("lion"), params);
  REQUIRE(group_options<kiln::optim::LionOptions>(*lion).beta2() == 0.99);
  REQUIRE(group_options<kiln::optim::LionOptions>(*lion).weight_decay() ==
          kiln::optim::LionOptions().weight_decay());

  const auto sgd = kiln::optim::make_optimizer(named("sgd"), params);
  REQUIRE_FALSE(group_options<kiln::optim::SGDOptions>(*sgd).nesterov());
  REQUIRE(group_options<kiln::optim::SGDOptions>(*sgd).momentum() == 0.0);

  const auto muon = kiln::optim::make_optimizer(named("muon"), params);
  const auto& matrices = group_options<kiln::optim::MuonOptions>(*muon, 0);
  REQUIRE_FALSE(matrices.adamw());
  REQUIRE(matrices.momentum() == 0.95);
  REQUIRE(matrices.nesterov());
  const auto& vectors = group_options<kiln::optim::MuonOptions>(*muon, 1);
  REQUIRE(vectors.adamw());
  REQUIRE(vectors.lr() == kiln::optim::muon_adamw_group_defaults().lr());

  auto spec = named("sgd");
  spec.nesterov = true;  // without momentum: the optimizer's own check says why not
  REQUIRE_THROWS_WITH(kiln::optim::make_optimizer(spec, params),
                      Catch::Contains("optim: SGD: nesterov: expected momentum > 0"));
}

TEST_CASE("Muon given the head a model names steps that head with its AdamW",
          "[optim][factory][muon]") {
  kiln::nn::ModelSpec model_spec;
  model_spec.mlp = kiln::nn::MlpOptions(8, {6, 5}, 3);
  const auto model = kiln::nn::make_model(model_spec);
  auto spec = named("muon");
  for (const auto& h : kiln::nn::head_parameters(*model.ptr())) spec.muon_exclude.push_back(h);
  const auto named_params = model.ptr()->named_parameters();
  const auto opt = kiln::optim::make_optimizer(spec, named_params);
  const auto holds = [&](size_t g, const std::string& name) {
    for (const auto& p : opt->param_groups().at(g).params())
      if (p.is_same(named_params[name])) return true;
    return false;
  };
  REQUIRE(holds(0, "layers.0.weight"));  // hidden matrices: Muon
  REQUIRE(holds(0, "layers.1.weight"));
  REQUIRE(holds(1, "layers.2.weight"));  // the head: AdamW
  REQUIRE_FALSE(holds(0, "layers.2.weight"));
}
