// Saving mid-training: for every optimizer (built by name, with a schedule and
// clipping), N steps, a state file, fresh model/optimizer/schedule objects loaded
// from it and N more steps give bit-identical parameters to 2N uninterrupted
// steps; state files for other parameters or optimizers are clear errors that
// leave the optimizer unchanged.
#include <torch/torch.h>

#include "nn/mlp.h"
#include "ops/ops.h"
#include "optim/clip.h"
#include "optim/factory.h"
#include "optim/schedule.h"
#include "support.h"
#include "util/error.h"

namespace {

using kiln::optim::OptimizerSpec;

OptimizerSpec spec_for(const std::string& name) {
  OptimizerSpec s;
  s.name = name;
  s.lr = name == "lion" ? 3e-4 : name == "sgd" ? 0.05 : name == "muon" ? 0.02 : 1e-3;
  s.weight_decay = 0.01;
  if (name == "sgd") s.momentum = 0.9;  // SGD's own default (0) keeps no state to save
  s.muon_exclude = {"layers.2."};  // the head of a two-hidden-layer Mlp
  return s;
}

const kiln::optim::ScheduleOptions kSchedule =
    kiln::optim::ScheduleOptions().kind("cosine").warmup_steps(3).total_steps(20).min_lr_ratio(0.1);

// A model, its optimizer and schedule, made the same way every time from a seed.
struct Run {
  explicit Run(const std::string& name, uint64_t seed, std::vector<int64_t> hidden = {12, 10},
               torch::Dtype dtype = torch::kFloat) {
    torch::manual_seed(seed);
    net = kiln::nn::Mlp(kiln::nn::MlpOptions(8, std::move(hidden), 3));
    net->to(dtype);
    opt = kiln::optim::make_optimizer(spec_for(name), net->named_parameters());
    sched = std::make_unique<kiln::optim::LrSchedule>(*opt, kSchedule);
  }
  void train(int from, int to) {
    for (int step = from; step < to; ++step) {
      torch::manual_seed(1000 + step);  // the batch of step `step`, whatever came before
      const auto x = torch::randn({32, 8});
      const auto y = torch::randint(0, 3, {32});
      opt->zero_grad();
      kiln::ops::cross_entropy(net->forward(x), y).backward();
      kiln::optim::clip_grad_norm(net->parameters(), 0.5);
      opt->step();
      sched->step();
    }
  }
  void save(const std::string& path) const {
    torch::serialize::OutputArchive ar, optim;
    net->save(ar);
    opt->save(optim);
    sched->save(optim);
    ar.write("optimizer", optim);
    ar.save_to(path);
  }
  void load(const std::string& path) {
    torch::serialize::InputArchive ar, optim;
    ar.load_from(path);
    net->load(ar);
    REQUIRE(ar.try_read("optimizer", optim));
    opt->load(optim);
    sched->load(optim);
  }
  kiln::nn::Mlp net{nullptr};
  std::unique_ptr<torch::optim::Optimizer> opt;
  std::unique_ptr<kiln::optim::LrSchedule> sched;
};

// Loads `path`'s optimizer entry into `opt`, expecting it to throw.
void load_optimizer(torch::optim::Optimizer& opt, const std::string& path) {
  torch::serialize::InputArchive ar, optim;
  ar.load_from(path);
  REQUIRE(ar.try_read("optimizer", optim));
  opt.load(optim);
}

}  // namespace

TEST_CASE("Every optimizer resumed from a state file after N steps matches 2N uninterrupted steps "
          "bit for bit",
          "[optim][state]") {
  constexpr int kN = 6;
  for (const auto& name : kiln::optim::optimizer_names()) {
    INFO("optimizer " << name);
    kiln::test::TempDir dir;
    Run whole(name, 1);
    whole.train(0, 2 * kN);

    Run first(name, 1);
    first.train(0, kN);
    first.save(dir / "state.pt");
    Run resumed(name, 99);  // fresh objects, other initial weights
    resumed.load(dir / "state.pt");
    resumed.train(kN, 2 * kN);

    CHECK(resumed.sched->steps_done() == 2 * kN);
    const auto a = whole.net->parameters(), b = resumed.net->parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      INFO("parameter " << i);
      REQUIRE(torch::equal(a[i], b[i]));
    }
    // The parameters did move: the comparison is not between two untouched models.
    REQUIRE(!torch::equal(a[0], Run(name, 1).net->parameters()[0]));
  }
}

TEST_CASE("A state file for other parameters or another optimizer is a clear error that changes "
          "nothing",
          "[optim][state]") {
  for (const auto& name : kiln::optim::optimizer_names()) {
    INFO("optimizer " << name);
    kiln::test::TempDir dir;
    Run saved(name, 1);
    saved.train(0, 2);
    saved.save(dir / "state.pt");

    // Other widths: the first shape difference is named (group, parameter, both shapes).
    Run shape(name, 1, {12, 11});
    shape.train(0, 1);
    const auto before = shape.opt->state().size();
    const double lr_before = shape.opt->param_groups()[0].options().get_lr();
    auto* first_state = shape.opt->state().begin()->second.get();
    REQUIRE_THROWS_WITH(load_optimizer(*shape.opt, dir / "state.pt"),
                        Catch::Contains("parameter") && Catch::Contains("but the parameter is"));
    CHECK(shape.opt->state().size() == before);
    CHECK(shape.opt->state().begin()->second.get() == first_state);
    CHECK(shape.opt->param_groups()[0].options().get_lr() == lr_before);

    // Another number of parameters (one more hidden layer).
    Run count(name, 1, {12, 10, 9});
    REQUIRE_THROWS_WITH(load_optimizer(*count.opt, dir / "state.pt"),
                        Catch::Contains("parameters, the file has"));

    // Another dtype.
    Run dtype(name, 1, {12, 10}, torch::kDouble);
    REQUIRE_THROWS_WITH(load_optimizer(*dtype.opt, dir / "state.pt"),
                        Catch::Contains("Float") && Catch::Contains("Double"));
  }
  // Another optimizer's file.
  kiln::test::TempDir dir;
  Run sgd("sgd", 1);
  sgd.train(0, 1);
  sgd.save(dir / "sgd.pt");
  Run lion("lion", 1);
  REQUIRE_THROWS_WITH(load_optimizer(*lion.opt, dir / "sgd.pt"),
                      Catch::Contains("expected a kiln::optim::Lion state, got kiln::optim::SGD"));
}

TEST_CASE("make_optimizer builds every named optimizer and lists the valid names for an unknown one",
          "[optim][factory]") {
  kiln::nn::Mlp net(kiln::nn::MlpOptions(8, {12}, 3));
  for (const auto& name : kiln::optim::optimizer_names())
    REQUIRE(kiln::optim::make_optimizer(spec_for(name), net->named_parameters()) != nullptr);
  OptimizerSpec bad;
  bad.name = "adam";
  REQUIRE_THROWS_AS(kiln::optim::make_optimizer(bad, net->named_parameters()), kiln::InputError);
  REQUIRE_THROWS_WITH(kiln::optim::make_optimizer(bad, net->named_parameters()),
                      Catch::Contains("optim.name: expected one of adamw, sgd, lion, muon, found \"adam\""));
  OptimizerSpec negative;
  negative.lr = -1;
  REQUIRE_THROWS_AS(kiln::optim::make_optimizer(negative, net->named_parameters()), kiln::InputError);
}
