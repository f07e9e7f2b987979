// kiln::optim::SGD: the update (the arithmetic of torch::optim::SGD, run by the
// fused kernel kiln::ops::fused_sgd_ once per device, dtype and first step of a group)
// and its state through state_io.h.
#include "optim/sgd.h"

#include "optim/group_options.h"
#include "optim/state_io.h"

#include <map>
#include <tuple>

#include "ops/ops.h"

namespace kiln::optim {
namespace {

void check_options(const SGDOptions& o, const std::string& where) {
  TORCH_CHECK(o.lr() >= 0, where, "lr: expected >= 0, got ", o.lr());
  TORCH_CHECK(o.momentum() >= 0, where, "momentum: expected >= 0, got ", o.momentum());
  TORCH_CHECK(o.weight_decay() >= 0, where, "weight_decay: expected >= 0, got ", o.weight_decay());
  TORCH_CHECK(!o.nesterov() || (o.momentum() > 0 && o.dampening() == 0), where,
              "nesterov: expected momentum > 0 and dampening 0, got momentum ", o.momentum(),
              " and dampening ", o.dampening());
}

struct SGDCodec {
  static constexpr const char* kKind = "kiln::optim::SGD";
  using Options = SGDOptions;
  using ParamState = SGDParamState;
  template <class O, class F>
  static void options(O& o, F&& f) {
    f("lr", o.lr());
    f("momentum", o.momentum());
    f("dampening", o.dampening());
    f("weight_decay", o.weight_decay());
    f("nesterov", o.nesterov());
  }
  template <class S, class F>
  static void state(S& s, F&& f) {
    f("momentum_buffer", s.momentum_buffer());
  }
};

}  // namespace

SGD::SGD(const std::vector<torch::optim::OptimizerParamGroup>& param_groups, SGDOptions defaults)
    : Optimizer(param_groups, std::make_unique<SGDOptions>(defaults)) {
  setup_groups(*this, param_groups, defaults, "SGD", check_options);
}

torch::Tensor SGD::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss = run_closure(closure);
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const SGDOptions&>(group.options());
    // One fused call per (device, dtype, first step) of this group: a parameter's
    // first step with momentum sets its buffer to the update instead of moving it.
    struct Bucket {
      std::vector<at::Tensor> params, grads, buffers;
    };
    std::map<std::tuple<int, int, at::ScalarType, bool>, Bucket> buckets;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      TORCH_CHECK(!p.grad().is_sparse(), "SGD: sparse gradients are not supported");
      bool first = false;
      at::Tensor buffer;
      if (o.momentum() != 0) {
        auto& slot = state_[p.unsafeGetTensorImpl()];
        // State initialization: the first buffer is the update itself (written by the kernel).
        if (!slot) {
          auto s = std::make_unique<SGDParamState>();
          s->momentum_buffer(torch::empty_like(p, at::MemoryFormat::Preserve));
          slot = std::move(s);
          first = true;
        }
        buffer = static_cast<SGDParamState&>(*slot).momentum_buffer();
      }
      auto& b = buckets[{static_cast<int>(p.device().type()), p.device().index(), p.scalar_type(), first}];
      b.params.push_back(p), b.grads.push_back(p.grad());
      if (buffer.defined()) b.buffers.push_back(buffer);
    }
    for (const auto& [id, b] : buckets)
      kiln::ops::fused_sgd_(b.params, b.grads, b.buffers, o.lr(), o.momentum(), o.dampening(),
                            o.weight_decay(), o.nesterov(), std::get<3>(id));
  }
  return loss;
}

void SGD::save(torch::serialize::OutputArchive& ar) const { save_state<SGDCodec>(*this, ar); }
void SGD::load(torch::serialize::InputArchive& ar) { load_state<SGDCodec>(*this, ar); }
std::vector<at::Tensor> SGD::state_tensors() const {
  return codec_state_tensors<SGDCodec>(*this);
}

}  // namespace kiln::optim
