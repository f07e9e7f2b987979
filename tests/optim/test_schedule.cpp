// LrSchedule: the factor of each kind at chosen steps, its effect on every
// group's lr, save/load, and the errors for unknown names.
#include <torch/torch.h>

#include <sstream>

#include "optim/schedule.h"
#include "optim/sgd.h"
#include "support.h"
#include "util/error.h"

using kiln::optim::LrSchedule;
using kiln::optim::ScheduleOptions;

namespace {

kiln::optim::SGD two_groups(torch::Tensor& a, torch::Tensor& b) {
  std::vector<torch::optim::OptimizerParamGroup> g;
  g.emplace_back(std::vector<torch::Tensor>{a},
                 std::make_unique<kiln::optim::SGDOptions>(kiln::optim::SGDOptions(0.1)));
  g.emplace_back(std::vector<torch::Tensor>{b},
                 std::make_unique<kiln::optim::SGDOptions>(kiln::optim::SGDOptions(0.01)));
  return kiln::optim::SGD(std::move(g));
}

double lr(const torch::optim::Optimizer& o, size_t g) { return o.param_groups()[g].options().get_lr(); }

}  // namespace

TEST_CASE("Schedules give the expected factors at chosen steps for every kind", "[optim][schedule]") {
  auto a = torch::zeros({2}, torch::requires_grad()), b = torch::zeros({2}, torch::requires_grad());
  auto opt = two_groups(a, b);
  auto f = [&](ScheduleOptions o, int64_t t) { return LrSchedule(opt, std::move(o)).factor(t); };

  const auto constant = ScheduleOptions().kind("constant").warmup_steps(4);
  CHECK(f(constant, 0) == Approx(0.25));
  CHECK(f(constant, 3) == Approx(1.0));
  CHECK(f(constant, 1000) == Approx(1.0));

  const auto cosine = ScheduleOptions().kind("cosine").warmup_steps(10).total_steps(110).min_lr_ratio(0.1);
  CHECK(f(cosine, 4) == Approx(0.5));
  CHECK(f(cosine, 10) == Approx(1.0));
  CHECK(f(cosine, 60) == Approx(0.55));  // half way: 0.1 + 0.9·(1 + cos(π/2))/2
  CHECK(f(cosine, 35) == Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 4))));
  CHECK(f(cosine, 110) == Approx(0.1));
  CHECK(f(cosine, 500) == Approx(0.1));

  const auto linear = ScheduleOptions().kind("linear").warmup_steps(10).total_steps(110).min_lr_ratio(0.1);
  CHECK(f(linear, 35) == Approx(0.775));
  CHECK(f(linear, 110) == Approx(0.1));

  const auto wsd = ScheduleOptions().kind("wsd").warmup_steps(10).decay_start(80).total_steps(100);
  CHECK(f(wsd, 9) == Approx(1.0));
  CHECK(f(wsd, 50) == Approx(1.0));
  CHECK(f(wsd, 79) == Approx(1.0));
  CHECK(f(wsd, 90) == Approx(0.5));
  CHECK(f(wsd, 95) == Approx(0.25));
  CHECK(f(wsd, 100) == Approx(0.0).margin(1e-12));
  CHECK(f(ScheduleOptions(wsd).decay_shape("cosine"), 95) == Approx(0.5 * (1 + std::cos(0.75 * M_PI))));
}

TEST_CASE("A schedule scales every group's own base lr and is restored from a saved state",
          "[optim][schedule]") {
  auto a = torch::zeros({2}, torch::requires_grad()), b = torch::zeros({2}, torch::requires_grad());
  auto opt = two_groups(a, b);
  const auto o = ScheduleOptions().kind("linear").warmup_steps(2).total_steps(12);
  LrSchedule sched(opt, o);
  CHECK(lr(opt, 0) == Approx(0.05));
  CHECK(lr(opt, 1) == Approx(0.005));
  for (int i = 0; i < 7; ++i) sched.step();  // t = 7: 1 − 5/10
  CHECK(lr(opt, 0) == Approx(0.05));
  CHECK(lr(opt, 1) == Approx(0.005));
  sched.step();
  CHECK(lr(opt, 0) == Approx(0.04));

  std::stringstream file;
  {
    torch::serialize::OutputArchive ar;
    sched.save(ar);
    ar.save_to(file);
  }
  auto c = torch::zeros({2}, torch::requires_grad()), d = torch::zeros({2}, torch::requires_grad());
  auto fresh = two_groups(c, d);
  LrSchedule restored(fresh, o);
  torch::serialize::InputArchive in;
  in.load_from(file);
  restored.load(in);
  CHECK(restored.steps_done() == 8);
  CHECK(lr(fresh, 0) == Approx(0.04));
  CHECK(lr(fresh, 1) == Approx(0.004));

  LrSchedule other_kind(fresh, ScheduleOptions().kind("cosine").total_steps(12));
  REQUIRE_THROWS_WITH(other_kind.load(in), Catch::Contains("expected a \"cosine\" schedule") &&
                                               Catch::Contains("\"linear\""));
}

TEST_CASE("An unknown schedule kind is an InputError listing the valid names", "[optim][schedule]") {
  auto a = torch::zeros({2}, torch::requires_grad()), b = torch::zeros({2}, torch::requires_grad());
  auto opt = two_groups(a, b);
  REQUIRE_THROWS_AS(LrSchedule(opt, ScheduleOptions().kind("cosin")), kiln::InputError);
  REQUIRE_THROWS_WITH(LrSchedule(opt, ScheduleOptions().kind("cosin")),
                      Catch::Contains("constant, cosine, linear, wsd") && Catch::Contains("\"cosin\""));
  REQUIRE_THROWS_WITH(LrSchedule(opt, ScheduleOptions().kind("cosine").warmup_steps(10).total_steps(5)),
                      Catch::Contains("total_steps: expected more than warmup_steps"));
}
