// kiln::optim::Lion: the update (run by the fused kernel kiln::ops::fused_lion_ once
// per device and dtype of a group) and its state through state_io.h.
#include "optim/lion.h"

#include "optim/group_options.h"
#include "optim/state_io.h"

#include <map>
#include <tuple>

#include "ops/ops.h"

namespace kiln::optim {
namespace {

void check_options(const LionOptions& o, const std::string& where) {
  TORCH_CHECK(o.lr() >= 0, where, "lr: expected >= 0, got ", o.lr());
  TORCH_CHECK(o.beta1() >= 0 && o.beta1() <= 1, where, "beta1: expected in [0, 1], got ", o.beta1());
  TORCH_CHECK(o.beta2() >= 0 && o.beta2() < 1, where, "beta2: expected in [0, 1), got ", o.beta2());
  TORCH_CHECK(o.weight_decay() >= 0, where, "weight_decay: expected >= 0, got ", o.weight_decay());
}

struct LionCodec {
  static constexpr const char* kKind = "kiln::optim::Lion";
  using Options = LionOptions;
  using ParamState = LionParamState;
  template <class O, class F>
  static void options(O& o, F&& f) {
    f("lr", o.lr());
    f("beta1", o.beta1());
    f("beta2", o.beta2());
    f("weight_decay", o.weight_decay());
  }
  template <class S, class F>
  static void state(S& s, F&& f) {
    f("exp_avg", s.exp_avg());
  }
};

}  // namespace

Lion::Lion(const std::vector<torch::optim::OptimizerParamGroup>& param_groups, LionOptions defaults)
    : Optimizer(param_groups, std::make_unique<LionOptions>(defaults)) {
  setup_groups(*this, param_groups, defaults, "Lion", check_options);
}

torch::Tensor Lion::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss = run_closure(closure);
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const LionOptions&>(group.options());
    // One fused call per (device, dtype) of this group: the kernel takes one of each.
    struct Bucket {
      std::vector<at::Tensor> params, grads, exp_avgs;
    };
    std::map<std::tuple<int, int, at::ScalarType>, Bucket> buckets;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const auto& grad = p.grad();
      TORCH_CHECK(!grad.is_sparse(), "Lion: sparse gradients are not supported");
      auto& slot = state_[p.unsafeGetTensorImpl()];
      // State initialization
      if (!slot) {
        auto s = std::make_unique<LionParamState>();
        s->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        slot = std::move(s);
      }
      auto& b = buckets[{static_cast<int>(p.device().type()), p.device().index(), p.scalar_type()}];
      b.params.push_back(p), b.grads.push_back(grad);
      b.exp_avgs.push_back(static_cast<LionParamState&>(*slot).exp_avg());
    }
    for (const auto& [id, b] : buckets)
      kiln::ops::fused_lion_(b.params, b.grads, b.exp_avgs, o.lr(), o.beta1(), o.beta2(),
                             o.weight_decay());
  }
  return loss;
}

void Lion::save(torch::serialize::OutputArchive& ar) const { save_state<LionCodec>(*this, ar); }
void Lion::load(torch::serialize::InputArchive& ar) { load_state<LionCodec>(*this, ar); }
std::vector<at::Tensor> Lion::state_tensors() const {
  return codec_state_tensors<LionCodec>(*this);
}

}  // namespace kiln::optim
