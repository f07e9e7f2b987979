// kiln_bench_optim: one optimizer step over 100 tensors totalling 10M parameters
// (mixed sizes, like a model's weights and biases), kiln against its references,
// interleaved round by round, printing ref/kiln ratios (> 1: kiln is faster) and
// each side's GB/s against a copy of the parameter count in the same run (AdamW moves
// 28 bytes per float32 parameter, Lion and SGD with momentum 20). --json FILE
// writes the rows in the shape of kiln_bench_ops'.
//
// Adding an optimizer (Lion, Muon, SGD, …): write a `std::vector<Case> NAME_cases(const
// Setup& s)` that builds its own parameters with s.parameters() (fresh tensors with
// gradients, so no two sides share state), and returns cases with op = "NAME",
// pass = "step", kiln = NAME's step, ref = the reference's step and ref_name saying
// what the reference is — "kiln::optim::AdamW" (make_adamw(s.parameters()) makes
// one) to report a step time against AdamW's; set bytes to the bytes the step must
// move (and ref_bytes to the reference's, when they differ). Then append it to
// kCaseMakers below.
#include "bench_support.h"
#include "ops/cpu_capability.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "optim/lion.h"
#include "optim/muon.h"
#include "optim/sgd.h"

#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <memory>

namespace {

namespace kb = kiln::bench;
using kb::Case;

constexpr double kLr = 1e-3, kBeta1 = 0.9, kBeta2 = 0.999, kWeightDecay = 1e-2, kEps = 1e-8;

// The parameter shapes: 75 matrices (rows, 1024) of mixed heights and 25 bias
// vectors, scaled to total about `total` parameters.
std::vector<std::vector<int64_t>> model_shapes(int64_t total) {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int64_t> weights;
  int64_t biases = 0, weight_sum = 0;
  for (int i = 0; i < 100; ++i) {
    if (i % 4 == 3) biases += 1024 * (1 + i % 3);
    else weight_sum += 1 + (i * 7) % 13;
  }
  for (int i = 0; i < 100; ++i) {
    if (i % 4 == 3) {
      shapes.push_back({1024 * (1 + i % 3)});
    } else {
      const double share = static_cast<double>(1 + (i * 7) % 13) / weight_sum;
      shapes.push_back({std::max<int64_t>(1, std::llround(share * (total - biases) / 1024)), 1024});
    }
  }
  return shapes;
}

struct Setup {
  std::vector<std::vector<int64_t>> shapes;
  at::TensorOptions options;
  int64_t total = 0;  // parameters

  /// Fresh parameters with gradients (the same values every call).
  std::vector<at::Tensor> parameters() const {
    at::manual_seed(0);
    std::vector<at::Tensor> ps;
    for (const auto& shape : shapes) {
      auto p = at::randn(shape, options).requires_grad_(true);
      p.mutable_grad() = at::randn(shape, options);
      ps.push_back(p);
    }
    return ps;
  }
};

std::shared_ptr<kiln::optim::AdamW> make_adamw(std::vector<at::Tensor> ps) {
  return std::make_shared<kiln::optim::AdamW>(
      std::move(ps), kiln::optim::AdamWOptions(kLr).beta1(kBeta1).beta2(kBeta2).eps(kEps).weight_decay(
                         kWeightDecay));
}

// The moments and step counts at::_fused_adamw_ takes, for parameters ps.
struct FusedState {
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
  explicit FusedState(const std::vector<at::Tensor>& ps) {
    for (const auto& p : ps) {
      params.push_back(p.detach()), grads.push_back(p.grad());
      exp_avgs.push_back(at::zeros_like(p)), exp_avg_sqs.push_back(at::zeros_like(p));
      steps.push_back(at::ones({}, p.options().dtype(at::kFloat)));
    }
  }
  void aten_step() {
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, kLr, kBeta1, kBeta2,
                      kWeightDecay, kEps, /*amsgrad=*/false, /*maximize=*/false);
  }
};

// AdamW: kiln's optimizer step against torch::optim::AdamW's and against ATen's
// fused kernel (the optimizer's bookkeeping included on kiln's side only); kiln's
// fused op alone against ATen's fused kernel.
std::vector<Case> adamw_cases(const Setup& s) {
  const double bytes = 7.0 * s.total * s.options.dtype().itemsize();  // read p g m v, write p m v
  std::vector<Case> cases;
  const auto ours = make_adamw(s.parameters());
  auto torch_opt = std::make_shared<torch::optim::AdamW>(
      s.parameters(), torch::optim::AdamWOptions(kLr).betas({kBeta1, kBeta2}).eps(kEps).weight_decay(
                          kWeightDecay));
  cases.push_back({"adamw", "step", [=] { ours->step(); }, [=] { torch_opt->step(); }, bytes,
                   "torch::optim::AdamW"});
  auto aten = std::make_shared<FusedState>(s.parameters());
  try {
    aten->aten_step();
  } catch (const std::exception& e) {
    std::printf("(no at::_fused_adamw_ on %s in this libtorch: %s)\n", s.options.device().str().c_str(),
                e.what());
    return cases;
  }
  cases.push_back({"adamw", "step", [=] { ours->step(); }, [=] { aten->aten_step(); }, bytes,
                   "at::_fused_adamw_"});
  auto op = std::make_shared<FusedState>(s.parameters());
  cases.push_back({"fused_adamw_", "op",
                   [=] {
                     torch::NoGradGuard no_grad;
                     kiln::ops::fused_adamw_(op->params, op->grads, op->exp_avgs, op->exp_avg_sqs,
                                             kLr, kBeta1, kBeta2, kWeightDecay, kEps, 10);
                   },
                   [=] { aten->aten_step(); }, bytes, "at::_fused_adamw_"});
  return cases;
}

// Lion, SGD and Muon: each optimizer's step against kiln::optim::AdamW's on the
// same parameters (a step time reported against AdamW), and SGD also against
// torch::optim::SGD. Muon orthogonalises the 75 matrices and leaves the 25 bias
// vectors to its inner AdamW.
std::vector<Case> other_cases(const Setup& s) {
  const double item = s.options.dtype().itemsize();
  const auto adamw = make_adamw(s.parameters());
  auto lion = std::make_shared<kiln::optim::Lion>(
      s.parameters(), kiln::optim::LionOptions(kLr).weight_decay(kWeightDecay));
  auto sgd = std::make_shared<kiln::optim::SGD>(
      s.parameters(), kiln::optim::SGDOptions(kLr).momentum(0.9).nesterov(true));
  auto torch_sgd = std::make_shared<torch::optim::SGD>(
      s.parameters(), torch::optim::SGDOptions(kLr).momentum(0.9).nesterov(true));
  std::vector<at::Tensor> matrices, vectors;
  for (auto& p : s.parameters()) (p.dim() == 2 ? matrices : vectors).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(matrices, std::make_unique<kiln::optim::MuonOptions>(kiln::optim::MuonOptions(0.02)));
  groups.emplace_back(vectors, std::make_unique<kiln::optim::MuonOptions>(
                                   kiln::optim::MuonOptions(kLr).adamw(true).weight_decay(kWeightDecay)));
  auto muon = std::make_shared<kiln::optim::Muon>(groups);
  const char* vs_adamw = "kiln::optim::AdamW";
  const double adamw_bytes = 7.0 * s.total * item;  // read p g m v, write p m v
  return {{"lion", "step", [=] { lion->step(); }, [=] { adamw->step(); }, 5.0 * s.total * item, vs_adamw,
           adamw_bytes},
          {"sgd", "step", [=] { sgd->step(); }, [=] { adamw->step(); }, 5.0 * s.total * item, vs_adamw,
           adamw_bytes},
          {"sgd", "step", [=] { sgd->step(); }, [=] { torch_sgd->step(); }, 5.0 * s.total * item,
           "torch::optim::SGD"},
          {"muon", "step", [=] { muon->step(); }, [=] { adamw->step(); }, 0.0, vs_adamw, adamw_bytes}};
}

using CaseMaker = std::vector<Case> (*)(const Setup&);
const std::vector<CaseMaker> kCaseMakers = {adamw_cases, other_cases};

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("kiln_bench_optim", "kiln optimizer steps against their references");
  kb::add_common_options(options, "9", "100");
  options.add_options()
      ("params", "total parameters over the 100 tensors", cxxopts::value<int64_t>()->default_value("10000000"))
      ("dtypes", "float32, float16, bfloat16, float64",
       cxxopts::value<std::vector<std::string>>()->default_value("float32"));
  const auto args = options.parse(argc, argv);
  std::optional<kb::Common> common;
  try {
    common = kb::parse_common(options, args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln_bench_optim: %s\n", e.what());
    return 2;
  }
  if (!common) return 0;
  const auto& device = common->device;
  std::printf("kiln_bench_optim on %s, CPU capability %s\n", device.str().c_str(),
              kiln::ops::to_string(kiln::ops::cpu_capability()).c_str());
  nlohmann::json out = nlohmann::json::array();
  for (const auto& dname : args["dtypes"].as<std::vector<std::string>>()) {
    if (!kb::dtype_names().count(dname)) {
      std::fprintf(stderr, "kiln_bench_optim: --dtypes: unknown dtype '%s'\n", dname.c_str());
      return 2;
    }
    Setup s{model_shapes(args["params"].as<int64_t>()),
            at::TensorOptions().dtype(kb::dtype_names().at(dname)).device(device)};
    for (const auto& shape : s.shapes) s.total += c10::multiply_integers(shape);
    std::printf("%zu tensors, %lld parameters, %s\n", s.shapes.size(),
                static_cast<long long>(s.total), dname.c_str());
    const kb::Table table("params");
    const auto size = std::to_string(s.total);
    for (const int t : common->threads) {
      at::set_num_threads(t);
      // The copy of the parameter count at these threads: the bandwidth yardstick.
      const auto copy = kb::copy_bandwidth(s.total, s.options, common->rounds, common->min_ms);
      table.copy(dname, size, t, copy);
      for (const auto make : kCaseMakers) {
        for (const auto& c : make(s)) {
          const auto m = kb::measure(c, device, common->rounds, common->min_ms);
          table.row(c, dname, size, t, m, copy.gbps);
          out.push_back(kb::json_row(c, device, dname, s.total, t, m, copy.gbps));
        }
      }
    }
  }
  kb::write_json(common->json, out);
  return 0;
}
