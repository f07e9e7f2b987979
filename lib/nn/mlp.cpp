// kiln::nn::Mlp: construction, initialisation and the forward pass.
#include "nn/mlp.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/zeros.h>

#include <array>
#include <tuple>

#include "nn/trace.h"
#include "ops/ops.h"

namespace kiln::nn {

MlpImpl::MlpImpl(MlpOptions options_) : options(std::move(options_)) {
  TORCH_CHECK(options.in_features() > 0, "Mlp: in_features: expected > 0, got ",
              options.in_features());
  TORCH_CHECK(options.out_features() > 0, "Mlp: out_features: expected > 0, got ",
              options.out_features());
  for (size_t i = 0; i < options.hidden().size(); ++i)
    TORCH_CHECK(options.hidden()[i] > 0, "Mlp: hidden[", i, "]: expected > 0, got ",
                options.hidden()[i]);
  TORCH_CHECK(options.dropout() >= 0.0 && options.dropout() < 1.0,
              "Mlp: dropout: expected a probability in [0, 1), got ", options.dropout());
  Activation(options.activation(), "Mlp");  // checks it
  reset();
}

void MlpImpl::reset() {
  layers_ = register_module("layers", torch::nn::ModuleList());
  int64_t width = options.in_features();
  for (const int64_t h : options.hidden()) {
    layers_->push_back(Linear(width, h));
    width = h;
  }
  layers_->push_back(Linear(width, options.out_features()));
}

void MlpImpl::reset_parameters() {
  for (auto& layer : *layers_) layer->as<Linear>()->reset_parameters();
}

torch::Tensor MlpImpl::forward(torch::Tensor x) {
  const LayerRule rule{Activation(options.activation(), "Mlp"), options.dropout(), is_training()};
  x = x.flatten(1);  // (B, in_features)
  const size_t last = layers_->size() - 1;
  for (size_t i = 0; i < last; ++i) x = rule(*layers_[i]->as<Linear>(), x);  // (B, hidden[i])
  return traced(*this, layers_[last]->as<Linear>()->forward(x));  // (B, out_features)
}

bool MlpImpl::taped_supported() const {
  const auto& name = options.activation().name();
  return name == "relu" || name == "gelu" || name == "sigmoid";
}

namespace {
// Empties the tape (its casts too unless `keep_casts`), keeping its vectors' capacity
// for the next micro-batch.
void clear(MlpTape& tape, bool keep_casts) {
  for (auto* v : {&tape.inputs, &tape.saved}) v->clear();
  if (!keep_casts) tape.casts.clear();
  tape.seeds.clear();
  tape.dropout = 0.0;
}
}  // namespace

torch::Tensor MlpImpl::forward_taped(const torch::Tensor& input, MlpTape& tape,
                                     std::optional<at::ScalarType> autocast, bool reuse_casts) {
  TORCH_CHECK(taped_supported(), "Mlp: forward_taped: expected relu, gelu or sigmoid hidden layers, got ",
              options.activation());
  TORCH_CHECK(!autocast || *autocast == at::kBFloat16 || *autocast == at::kHalf,
              "Mlp: forward_taped: autocast: expected bfloat16 or float16, got ", *autocast);
  at::AutoDispatchBelowADInplaceOrView below;  // no graph: backward_taped is the backward
  const Activation act(options.activation(), "Mlp");
  const auto& name = options.activation().name();
  const double p = is_training() ? options.dropout() : 0.0;  // random_dropout's rule
  const size_t last = layers_->size() - 1;
  // The casts of an earlier micro-batch of this step, where asked and made for these
  // layers in this dtype: the same values autocast would make again.
  const bool reuse = reuse_casts && autocast && tape.autocast == autocast && tape.casts.size() == 2 * (last + 1);
  clear(tape, reuse);
  tape.autocast = autocast;
  tape.dropout = p;
  // The lower precision copy the linear ops' autocast kernels would make (none in fp32).
  const auto lower = [&](const torch::Tensor& t) { return autocast ? kiln::ops::autocast_cast(t, *autocast) : t; };
  torch::Tensor x = input.flatten(1);  // (B, in_features)
  for (size_t i = 0; i <= last; ++i) {
    auto& layer = *layers_[i]->as<Linear>();
    x = lower(x);
    if (autocast && !reuse) {
      tape.casts.push_back(lower(layer.weight));
      tape.casts.push_back(lower(layer.bias));  // undefined without a bias
    }
    const auto& w = autocast ? tape.casts[2 * i] : layer.weight;
    const auto& b = autocast ? tape.casts[2 * i + 1] : layer.bias;
    const auto bias = b.defined() ? std::optional<torch::Tensor>(b) : std::nullopt;
    tape.inputs.push_back(x);
    if (i == last) return traced(*this, traced(layer, kiln::ops::linear(x, w, bias)));
    // As LayerRule: linear_relu or linear_gelu (whose node keeps z), or linear then
    // sigmoid (whose node keeps its output); then dropout.
    if (name == "gelu") {
      auto [y, z] = kiln::ops::linear_gelu_forward(x, w, bias);
      tape.saved.push_back(std::move(z));
      x = traced(layer, std::move(y));
    } else if (name == "sigmoid") {
      x = act.apply(traced(layer, kiln::ops::linear(x, w, bias)));
      tape.saved.push_back(x);
    } else {
      x = traced(layer, kiln::ops::linear_relu(x, w, bias));
      tape.saved.push_back(x);
    }
    if (p > 0.0) {  // a seed is any int64, negative ones too
      tape.seeds.push_back(kiln::ops::dropout_seed());
      x = kiln::ops::dropout(x, p, tape.seeds.back());
    }
  }
  return x;  // not reached: the head is the last layer
}

namespace {
// g into p's gradient as autograd's AccumulateGrad puts it there: taken as it is when
// p has none (copied into p's strides where they differ), else added in place.
void accumulate_grad(torch::Tensor& p, torch::Tensor g) {
  if (!g.defined()) return;
  auto& grad = p.mutable_grad();
  if (grad.defined()) grad.add_(g);
  else if (g.strides() == p.strides()) grad = std::move(g);
  else grad = at::empty_like(p).copy_(g);
}
}  // namespace

void MlpImpl::backward_taped(const torch::Tensor& grad, MlpTape& tape, bool keep_casts,
                             const std::function<void(const torch::Tensor&)>& ready) {
  const size_t layers = layers_->size();
  TORCH_CHECK(tape.inputs.size() == layers && tape.saved.size() + 1 == layers &&
                  tape.seeds.size() + 1 == (tape.dropout > 0.0 ? layers : 1) &&
                  tape.casts.size() == (tape.autocast ? 2 * layers : 0),
              "Mlp: backward_taped: expected the tape of a forward_taped of these ", layers,
              " layers, got ", tape.inputs.size(), " inputs");
  at::AutoDispatchBelowADInplaceOrView below;
  const auto& name = options.activation().name();
  const double beta = options.activation().sigmoid_beta(), clip = options.activation().sigmoid_grad_clip();
  // trains_before[i]: whether a layer before i has a parameter that requires a gradient,
  // so that autograd would carry the gradient on into layer i's input.
  std::vector<bool> trains_before(layers, false);
  for (size_t i = 1; i < layers; ++i) {
    const auto& prev = *layers_[i - 1]->as<Linear>();
    trains_before[i] = trains_before[i - 1] || prev.weight.requires_grad() ||
                       (prev.bias.defined() && prev.bias.requires_grad());
  }
  // A parameter's gradient from the product's: cast back as the autocast cast's node does.
  const auto back = [](torch::Tensor g, const torch::Tensor& p) {
    return g.defined() && g.scalar_type() != p.scalar_type() ? kiln::ops::autocast_cast_backward(g, p.scalar_type())
                                                             : g;
  };
  torch::Tensor g = grad;
  for (size_t i = layers; i-- > 0;) {
    auto& layer = *layers_[i]->as<Linear>();
    const bool dw = layer.weight.requires_grad(), db = layer.bias.defined() && layer.bias.requires_grad();
    if (!trains_before[i] && !dw && !db) break;  // autograd runs no node here or before
    std::array<bool, 3> mask = {trains_before[i], dw, db};
    torch::Tensor dbias;
    if (i + 1 < layers) {  // the nodes after the product, last first: dropout, then the activation
      if (tape.dropout > 0.0) g = kiln::ops::dropout(g, tape.dropout, tape.seeds[i]);
      const auto& saved = tape.saved[i];
      if (name == "relu") {
        g = kiln::ops::relu_backward(g, saved);
      } else if (name == "sigmoid") {
        g = kiln::ops::sigmoid_backward(g, saved, beta, clip > 0 ? std::optional<double>(clip) : std::nullopt);
      } else if (db && kiln::ops::linear_gelu_bias_grad_in_one_pass(saved)) {  // as linear_gelu's node
        std::tie(g, dbias) = kiln::ops::bias_gelu_backward(g, saved, at::zeros({saved.size(-1)}, saved.options()));
        mask[2] = false;
      } else {
        g = kiln::ops::gelu_backward(g, saved);
      }
    }
    const auto& w = tape.autocast ? tape.casts[2 * i] : layer.weight;
    auto [dx, dweight, dsum] = kiln::ops::linear_backward(g, tape.inputs[i], w, mask);
    if (dw) accumulate_grad(layer.weight, back(std::move(dweight), layer.weight));
    if (db) accumulate_grad(layer.bias, back(mask[2] ? std::move(dsum) : std::move(dbias), layer.bias));
    if (ready) {
      if (dw) ready(layer.weight);
      if (db) ready(layer.bias);
    }
    g = std::move(dx);
  }
  clear(tape, keep_casts);
  if (!keep_casts) tape.autocast.reset();
}

void MlpImpl::pretty_print(std::ostream& stream) const {
  stream << "kiln::nn::Mlp(in=" << options.in_features() << ", hidden=[";
  for (size_t i = 0; i < options.hidden().size(); ++i)
    stream << (i ? ", " : "") << options.hidden()[i];
  stream << "], out=" << options.out_features() << ", activation=" << options.activation()
         << ", dropout=" << options.dropout() << ")";
}

std::vector<std::string> MlpImpl::head_parameters() const {
  return parameter_names_of(*this, *layers_->ptr(layers_->size() - 1));
}

}  // namespace kiln::nn
