// The checked save/load every kiln optimizer shares: one archive layout (kind,
// group options, per-parameter state by position), and a load that reads and
// checks everything (kind, group and parameter counts, shapes, dtypes) before it
// changes anything, so a file for other parameters is a clear error that leaves
// the optimizer as it was. The same Codec lists a state's tensors for StateReporter.
#pragma once
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <functional>
#include <string>
#include <string_view>

namespace kiln::optim {

/// Archive keys: a group's option "group<g>_<name>", a parameter's state "state<g>_<i>_<name>".
std::string group_key(size_t g, std::string_view name);
std::string state_key(size_t g, size_t i, std::string_view name);

/// Writes the header ("kind", "groups", each "group<g>_size") and typed entries.
class StateWriter {
 public:
  StateWriter(torch::serialize::OutputArchive& ar, std::string_view kind,
              const std::vector<torch::optim::OptimizerParamGroup>& groups);
  void write(const std::string& key, double v);
  void write(const std::string& key, int64_t v);
  void write(const std::string& key, bool v);
  void write(const std::string& key, const torch::Tensor& t);

 private:
  torch::serialize::OutputArchive& ar_;
};

/// Checks the header against the optimizer's groups on construction, then reads
/// typed entries; every error starts "<kind> state: " and names what is wrong.
class StateReader {
 public:
  StateReader(torch::serialize::InputArchive& ar, std::string_view kind,
              const std::vector<torch::optim::OptimizerParamGroup>& groups);
  bool has(const std::string& key);
  void read(const std::string& key, double& v);
  void read(const std::string& key, int64_t& v);
  void read(const std::string& key, bool& v);
  /// A state tensor of parameter i of group g: same shape and dtype as the
  /// parameter (else an error naming group, parameter, both shapes), moved to its device.
  void read_like(size_t g, size_t i, std::string_view name, const torch::Tensor& param,
                 torch::Tensor& out);

 private:
  c10::IValue value(const std::string& key, const char* what);
  torch::serialize::InputArchive& ar_;
  std::string who_;  // "Lion state: "
};

/// Saves an optimizer's groups and state through a Codec, a struct with
///   static constexpr const char* kKind;  using Options = …;  using ParamState = …;
///   template <class F> static void options(Options&, F&& f);   // f("lr", o.lr()) …
///   template <class F> static void state(ParamState&, F&& f);  // f("step", s.step()) …
/// The fields are double, int64_t, bool or Tensor (state tensors are shaped like
/// their parameter); the first state field marks that a parameter has state.
/// Example: void Lion::save(OutputArchive& ar) const { save_state<LionCodec>(*this, ar); }
template <typename Codec>
void save_state(const torch::optim::Optimizer& opt, torch::serialize::OutputArchive& ar) {
  const auto& groups = opt.param_groups();
  StateWriter out(ar, Codec::kKind, groups);
  for (size_t g = 0; g < groups.size(); ++g) {
    auto o = static_cast<const typename Codec::Options&>(groups[g].options());
    Codec::options(o, [&](const char* name, const auto& v) { out.write(group_key(g, name), v); });
    const auto& params = groups[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      const auto it = opt.state().find(params[i].unsafeGetTensorImpl());
      if (it == opt.state().end()) continue;
      auto s = static_cast<const typename Codec::ParamState&>(*it->second);
      Codec::state(s, [&](const char* name, const auto& v) { out.write(state_key(g, i, name), v); });
    }
  }
}

/// The tensors of every parameter's state, through the same Codec (its Tensor
/// fields, undefined ones left out): what a kiln optimizer's state_tensors() reports.
/// Example: std::vector<at::Tensor> Lion::state_tensors() const { return codec_state_tensors<LionCodec>(*this); }
template <typename Codec>
std::vector<torch::Tensor> codec_state_tensors(const torch::optim::Optimizer& opt) {
  std::vector<torch::Tensor> out;
  for (const auto& [key, state] : opt.state()) {
    if (!state) continue;
    auto s = static_cast<const typename Codec::ParamState&>(*state);
    Codec::state(s, [&](const char*, const auto& v) {
      if constexpr (std::is_same_v<std::decay_t<decltype(v)>, torch::Tensor>)
        if (v.defined()) out.push_back(v);
    });
  }
  return out;
}

/// Reads what save_state wrote into `opt`, checking everything first; then runs
/// `before_commit` on the options read (it may still throw: check them, load an
/// inner optimizer) and only then replaces the groups' options and the state.
/// Example: void Lion::load(InputArchive& ar) { load_state<LionCodec>(*this, ar); }
template <typename Codec>
void load_state(torch::optim::Optimizer& opt, torch::serialize::InputArchive& ar,
                const std::function<void(const std::vector<typename Codec::Options>&)>&
                    before_commit = {}) {
  using Options = typename Codec::Options;
  using ParamState = typename Codec::ParamState;
  auto& groups = opt.param_groups();
  StateReader in(ar, Codec::kKind, groups);
  std::vector<Options> options;
  std::remove_reference_t<decltype(opt.state())> loaded;
  for (size_t g = 0; g < groups.size(); ++g) {
    Options o = static_cast<const Options&>(groups[g].options());
    Codec::options(o, [&](const char* name, auto& v) { in.read(group_key(g, name), v); });
    options.push_back(std::move(o));
    const auto& params = groups[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      auto s = std::make_unique<ParamState>();
      bool first = true, present = false;
      Codec::state(*s, [&](const char* name, auto& v) {
        if (first) present = in.has(state_key(g, i, name));  // no state yet for this one
        first = false;
        if (!present) return;
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, torch::Tensor>) {
          in.read_like(g, i, name, params[i], v);
        } else {
          in.read(state_key(g, i, name), v);
        }
      });
      if (present) loaded[params[i].unsafeGetTensorImpl()] = std::move(s);
    }
  }
  if (before_commit) before_commit(options);
  for (size_t g = 0; g < groups.size(); ++g)
    static_cast<Options&>(groups[g].options()) = std::move(options[g]);
  opt.state() = std::move(loaded);
}

}  // namespace kiln::optim
