// kiln::optim::AdamW: the update (the arithmetic of torch::optim::AdamW, run by the
// fused kernel kiln::ops::fused_adamw_ once per bucket of tensors) and its state
// through state_io.h.
#include "optim/adamw.h"

#include "optim/group_options.h"
#include "optim/state_io.h"

#include <map>
#include <tuple>

#include "ops/ops.h"

namespace kiln::optim {
namespace {

void check_options(const AdamWOptions& o, const std::string& where) {
  TORCH_CHECK(o.lr() >= 0, where, "lr: expected >= 0, got ", o.lr());
  TORCH_CHECK(o.eps() >= 0, where, "eps: expected >= 0, got ", o.eps());
  TORCH_CHECK(o.beta1() >= 0 && o.beta1() < 1, where, "beta1: expected in [0, 1), got ",
              o.beta1());
  TORCH_CHECK(o.beta2() >= 0 && o.beta2() < 1, where, "beta2: expected in [0, 1), got ",
              o.beta2());
  TORCH_CHECK(o.weight_decay() >= 0, where, "weight_decay: expected >= 0, got ",
              o.weight_decay());
}

// The tensors of one fused call.
struct Bucket {
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
};

struct AdamWCodec {
  static constexpr const char* kKind = "kiln::optim::AdamW";
  using Options = AdamWOptions;
  using ParamState = AdamWParamState;
  template <class O, class F>
  static void options(O& o, F&& f) {
    f("lr", o.lr());
    f("beta1", o.beta1());
    f("beta2", o.beta2());
    f("eps", o.eps());
    f("weight_decay", o.weight_decay());
  }
  template <class S, class F>
  static void state(S& s, F&& f) {
    f("step", s.step());
    f("exp_avg", s.exp_avg());
    f("exp_avg_sq", s.exp_avg_sq());
  }
};

}  // namespace

AdamW::AdamW(const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
             AdamWOptions defaults)
    : Optimizer(param_groups, std::make_unique<AdamWOptions>(defaults)) {
  setup_groups(*this, param_groups, defaults, "AdamW", check_options);
}

torch::Tensor AdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss = run_closure(closure);
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const AdamWOptions&>(group.options());
    // One fused call per (device, dtype, step) of this group: the kernel takes one
    // dtype and device per call and one step for its bias corrections (steps differ
    // only for parameters that got their first gradient late).
    std::map<std::tuple<int, int, at::ScalarType, int64_t>, Bucket> buckets;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const auto& grad = p.grad();
      TORCH_CHECK(!grad.is_sparse(), "AdamW: sparse gradients are not supported");
      auto& slot = state_[p.unsafeGetTensorImpl()];
      // State initialization
      if (!slot) {
        auto s = std::make_unique<AdamWParamState>();
        s->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        s->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        slot = std::move(s);
      }
      auto& s = static_cast<AdamWParamState&>(*slot);
      s.step(s.step() + 1);
      const auto device = p.device();
      auto& b = buckets[{static_cast<int>(device.type()), device.index(), p.scalar_type(), s.step()}];
      b.params.push_back(p), b.grads.push_back(grad);
      b.exp_avgs.push_back(s.exp_avg()), b.exp_avg_sqs.push_back(s.exp_avg_sq());
    }
    for (const auto& [id, b] : buckets)
      kiln::ops::fused_adamw_(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, o.lr(), o.beta1(),
                              o.beta2(), o.weight_decay(), o.eps(), std::get<3>(id));
  }
  return loss;
}

void AdamW::save(torch::serialize::OutputArchive& ar) const { save_state<AdamWCodec>(*this, ar); }
void AdamW::load(torch::serialize::InputArchive& ar) { load_state<AdamWCodec>(*this, ar); }
std::vector<at::Tensor> AdamW::state_tensors() const {
  return codec_state_tensors<AdamWCodec>(*this);
}

}  // namespace kiln::optim
