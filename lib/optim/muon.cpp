// kiln::optim::Muon: momentum and the Newton–Schulz orthogonalisation in ATen
// (two matrix products per iteration dominate), the AdamW groups delegated, and
// the state through state_io.h.
#include "optim/muon.h"

#include "optim/group_options.h"
#include "optim/state_io.h"

#include <algorithm>
#include <cmath>

namespace kiln::optim {
namespace {

void check_options(const MuonOptions& o, const std::string& where) {
  TORCH_CHECK(o.lr() >= 0, where, "lr: expected >= 0, got ", o.lr());
  TORCH_CHECK(o.momentum() >= 0 && o.momentum() < 1, where, "momentum: expected in [0, 1), got ",
              o.momentum());
  TORCH_CHECK(o.ns_steps() >= 1, where, "ns_steps: expected >= 1, got ", o.ns_steps());
  TORCH_CHECK(o.weight_decay() >= 0, where, "weight_decay: expected >= 0, got ", o.weight_decay());
  TORCH_CHECK(o.beta1() >= 0 && o.beta1() < 1, where, "beta1: expected in [0, 1), got ", o.beta1());
  TORCH_CHECK(o.beta2() >= 0 && o.beta2() < 1, where, "beta2: expected in [0, 1), got ", o.beta2());
  TORCH_CHECK(o.eps() >= 0, where, "eps: expected >= 0, got ", o.eps());
}

AdamWOptions adamw_options(const MuonOptions& o) {
  return AdamWOptions(o.lr()).beta1(o.beta1()).beta2(o.beta2()).eps(o.eps()).weight_decay(
      o.weight_decay());
}

struct MuonCodec {
  static constexpr const char* kKind = "kiln::optim::Muon";
  using Options = MuonOptions;
  using ParamState = MuonParamState;
  template <class O, class F>
  static void options(O& o, F&& f) {
    f("lr", o.lr());
    f("momentum", o.momentum());
    f("nesterov", o.nesterov());
    f("ns_steps", o.ns_steps());
    f("weight_decay", o.weight_decay());
    f("adamw", o.adamw());
    f("beta1", o.beta1());
    f("beta2", o.beta2());
    f("eps", o.eps());
  }
  template <class S, class F>
  static void state(S& s, F&& f) {
    f("momentum_buffer", s.momentum_buffer());
  }
};

}  // namespace

torch::Tensor newton_schulz(const torch::Tensor& g, int64_t steps) {
  TORCH_CHECK(g.dim() == 2, "newton_schulz: expected a 2-D tensor, got ", g.dim(), "-D");
  // The quintic whose iteration drives every singular value of a unit-norm
  // matrix into about [0.7, 1.2] in five steps (not exactly to 1: faster).
  constexpr double a = 3.4445, b = -4.7750, c = 2.0315;
  const bool tall = g.size(0) > g.size(1);
  auto x = g.to(torch::kFloat32);
  if (tall) x = x.t();
  x = x / (x.norm() + 1e-7);  // singular values ≤ 1
  for (int64_t k = 0; k < steps; ++k) {
    const auto A = torch::mm(x, x.t());            // (r, r), r = min(rows, cols)
    const auto B = torch::addmm(A, A, A, b, c);    // b·A + c·A²
    x = torch::addmm(x, B, x, a, 1.0);             // a·X + B·X
  }
  return tall ? x.t().contiguous() : x;
}

Muon::Muon(const std::vector<torch::optim::OptimizerParamGroup>& param_groups, MuonOptions defaults)
    : Optimizer(param_groups, std::make_unique<MuonOptions>(defaults)) {
  restore_group_options(*this, param_groups);
  check_options(defaults, "Muon: ");
  std::vector<torch::optim::OptimizerParamGroup> adamw_groups;
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    const auto& o = static_cast<const MuonOptions&>(param_groups_[g].options());
    const auto where = c10::str("Muon: group ", g, ": ");
    check_options(o, where);
    if (o.adamw()) {
      adamw_groups_.push_back(g);
      adamw_groups.emplace_back(param_groups_[g].params(),
                                std::make_unique<AdamWOptions>(adamw_options(o)));
      continue;
    }
    const auto& params = param_groups_[g].params();
    for (size_t i = 0; i < params.size(); ++i)
      TORCH_CHECK(params[i].dim() == 2, where, "parameter ", i,
                  ": expected a 2-D matrix (put other parameters in an adamw(true) group), got shape ",
                  params[i].sizes());
  }
  if (!adamw_groups.empty()) adamw_ = std::make_unique<AdamW>(adamw_groups);
}

torch::Tensor Muon::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss = run_closure(closure);
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const MuonOptions&>(group.options());
    if (o.adamw()) continue;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const auto& grad = p.grad();
      TORCH_CHECK(!grad.is_sparse(), "Muon: sparse gradients are not supported");
      auto& slot = state_[p.unsafeGetTensorImpl()];
      // State initialization
      if (!slot) {
        auto s = std::make_unique<MuonParamState>();
        s->momentum_buffer(torch::zeros_like(p, at::MemoryFormat::Preserve));
        slot = std::move(s);
      }
      auto& buf = static_cast<MuonParamState&>(*slot).momentum_buffer();
      buf.lerp_(grad, 1 - o.momentum());                       // μ·buf + (1−μ)·g
      const auto u = o.nesterov() ? grad.lerp(buf, o.momentum()) : buf;
      const auto ortho = newton_schulz(u, o.ns_steps());
      const double shape_scale =
          std::sqrt(std::max(1.0, static_cast<double>(p.size(0)) / static_cast<double>(p.size(1))));
      if (o.weight_decay() != 0) p.mul_(1 - o.lr() * o.weight_decay());
      p.add_(ortho.to(p.scalar_type()), -o.lr() * shape_scale);
    }
  }
  if (adamw_) {
    // The groups' options are the truth (a schedule may have changed their lr).
    for (size_t k = 0; k < adamw_groups_.size(); ++k)
      static_cast<AdamWOptions&>(adamw_->param_groups()[k].options()) = adamw_options(
          static_cast<const MuonOptions&>(param_groups_[adamw_groups_[k]].options()));
    adamw_->step();
  }
  return loss;
}

void Muon::save(torch::serialize::OutputArchive& ar) const {
  save_state<MuonCodec>(*this, ar);
  if (adamw_) {
    torch::serialize::OutputArchive inner(ar.compilation_unit());
    adamw_->save(inner);
    ar.write("adamw", inner);
  }
}

void Muon::load(torch::serialize::InputArchive& ar) {
  load_state<MuonCodec>(*this, ar, [&](const std::vector<MuonOptions>& options) {
    for (size_t g = 0; g < options.size(); ++g) {
      const bool ours = static_cast<const MuonOptions&>(param_groups_[g].options()).adamw();
      TORCH_CHECK(options[g].adamw() == ours, "Muon state: group ", g, ": expected ",
                  ours ? "an AdamW" : "a Muon", " group, the file has ", ours ? "a Muon" : "an AdamW",
                  " group");
    }
    if (!adamw_) return;
    torch::serialize::InputArchive inner;
    TORCH_CHECK(ar.try_read("adamw", inner), "Muon state: missing the AdamW groups' state 'adamw'");
    adamw_->load(inner);
  });
}

std::vector<at::Tensor> Muon::state_tensors() const {
  auto out = codec_state_tensors<MuonCodec>(*this);
  if (adamw_)
    for (auto& t : adamw_->state_tensors()) out.push_back(std::move(t));
  return out;
}

std::vector<torch::optim::OptimizerParamGroup> muon_param_groups(
    const torch::OrderedDict<std::string, torch::Tensor>& named_parameters,
    const std::vector<std::string>& exclude, const MuonOptions& muon, const MuonOptions& adamw) {
  std::vector<torch::Tensor> matrices, others;
  for (const auto& item : named_parameters) {
    const bool excluded = std::any_of(exclude.begin(), exclude.end(), [&](const std::string& s) {
      return item.key().find(s) != std::string::npos;
    });
    (item.value().dim() == 2 && !excluded ? matrices : others).push_back(item.value());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!matrices.empty())
    groups.emplace_back(std::move(matrices), std::make_unique<MuonOptions>(MuonOptions(muon).adamw(false)));
  if (!others.empty())
    groups.emplace_back(std::move(others), std::make_unique<MuonOptions>(MuonOptions(adamw).adamw(true)));
  return groups;
}

}  // namespace kiln::optim
