// kiln::optim::AdamW: the update (the arithmetic of torch::optim::AdamW, run by the
// fused kernel kiln::ops::fused_adamw_ once per bucket of tensors) and checked
// state save/load.
#include "optim/adamw.h"

#include "optim/group_options.h"

#include <torch/serialize/archive.h>

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

std::string key(const char* what, size_t g) { return c10::str("group", g, "_", what); }
std::string key(const char* what, size_t g, size_t i) {
  return c10::str("state", g, "_", i, "_", what);
}

double read_double(torch::serialize::InputArchive& ar, const std::string& k) {
  c10::IValue v;
  TORCH_CHECK(ar.try_read(k, v) && v.isDouble(), "AdamW state: missing or non-float entry '", k,
              "'");
  return v.toDouble();
}

int64_t read_int(torch::serialize::InputArchive& ar, const std::string& k) {
  c10::IValue v;
  TORCH_CHECK(ar.try_read(k, v) && v.isInt(), "AdamW state: missing or non-integer entry '", k,
              "'");
  return v.toInt();
}

}  // namespace

AdamW::AdamW(const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
             AdamWOptions defaults)
    : Optimizer(param_groups, std::make_unique<AdamWOptions>(defaults)) {
  restore_group_options(*this, param_groups);
  check_options(defaults, "AdamW: ");
  for (size_t g = 0; g < param_groups_.size(); ++g)
    check_options(static_cast<const AdamWOptions&>(param_groups_[g].options()),
                  c10::str("AdamW: group ", g, ": "));
}

torch::Tensor AdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
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

void AdamW::save(torch::serialize::OutputArchive& ar) const {
  ar.write("kind", c10::IValue(std::string("kiln::optim::AdamW")));
  ar.write("groups", c10::IValue(static_cast<int64_t>(param_groups_.size())));
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    const auto& group = param_groups_[g];
    const auto& o = static_cast<const AdamWOptions&>(group.options());
    ar.write(key("size", g), c10::IValue(static_cast<int64_t>(group.params().size())));
    ar.write(key("lr", g), c10::IValue(o.lr()));
    ar.write(key("beta1", g), c10::IValue(o.beta1()));
    ar.write(key("beta2", g), c10::IValue(o.beta2()));
    ar.write(key("eps", g), c10::IValue(o.eps()));
    ar.write(key("weight_decay", g), c10::IValue(o.weight_decay()));
    for (size_t i = 0; i < group.params().size(); ++i) {
      const auto it = state_.find(group.params()[i].unsafeGetTensorImpl());
      if (it == state_.end()) continue;
      const auto& s = static_cast<const AdamWParamState&>(*it->second);
      ar.write(key("step", g, i), c10::IValue(s.step()));
      ar.write(key("exp_avg", g, i), s.exp_avg());
      ar.write(key("exp_avg_sq", g, i), s.exp_avg_sq());
    }
  }
}

void AdamW::load(torch::serialize::InputArchive& ar) {
  c10::IValue kind;
  TORCH_CHECK(ar.try_read("kind", kind) && kind.isString() &&
                  kind.toStringRef() == "kiln::optim::AdamW",
              "AdamW state: expected a kiln::optim::AdamW state, got ",
              kind.isString() ? kind.toStringRef() : std::string("something else"));
  const int64_t groups = read_int(ar, "groups");
  TORCH_CHECK(groups == static_cast<int64_t>(param_groups_.size()), "AdamW state: expected ",
              param_groups_.size(), " parameter groups, the file has ", groups);
  // Read and check everything before changing anything: a bad file leaves the
  // optimizer as it was.
  std::vector<AdamWOptions> options;
  decltype(state_) loaded;
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    const auto& params = param_groups_[g].params();
    const int64_t size = read_int(ar, key("size", g));
    TORCH_CHECK(size == static_cast<int64_t>(params.size()), "AdamW state: group ", g,
                ": expected ", params.size(), " parameters, the file has ", size);
    AdamWOptions o(read_double(ar, key("lr", g)));
    o.beta1(read_double(ar, key("beta1", g)))
        .beta2(read_double(ar, key("beta2", g)))
        .eps(read_double(ar, key("eps", g)))
        .weight_decay(read_double(ar, key("weight_decay", g)));
    options.push_back(o);
    for (size_t i = 0; i < params.size(); ++i) {
      c10::IValue step;
      if (!ar.try_read(key("step", g, i), step)) continue;  // no state yet for this one
      auto s = std::make_unique<AdamWParamState>();
      s->step(step.toInt());
      for (const char* name : {"exp_avg", "exp_avg_sq"}) {
        torch::Tensor t;
        TORCH_CHECK(ar.try_read(key(name, g, i), t), "AdamW state: group ", g, " parameter ", i,
                    ": missing ", name);
        TORCH_CHECK(t.sizes() == params[i].sizes() && t.scalar_type() == params[i].scalar_type(),
                    "AdamW state: group ", g, " parameter ", i, ": ", name, " is ", t.scalar_type(),
                    t.sizes(), " but the parameter is ", params[i].scalar_type(), params[i].sizes());
        t = t.to(params[i].device());
        std::string(name) == "exp_avg" ? s->exp_avg(t) : s->exp_avg_sq(t);
      }
      loaded[params[i].unsafeGetTensorImpl()] = std::move(s);
    }
  }
  for (size_t g = 0; g < param_groups_.size(); ++g)
    static_cast<AdamWOptions&>(param_groups_[g].options()) = options[g];
  state_ = std::move(loaded);
}

}  // namespace kiln::optim
