// kiln::nn::ConvNet: construction (checks, the image size through the pools) and
// the forward pass.
#include "nn/convnet.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/nn/functional/conv.h>
#include <torch/nn/functional/pooling.h>

#include <algorithm>

#include "nn/trace.h"
#include "ops/linear/linear_onednn.h"
#include "ops/ops.h"
#include "util/env_switch.h"

namespace kiln::nn {

ConvNetImpl::ConvNetImpl(ConvNetOptions options_) : options(std::move(options_)) {
  const auto& s = options.input_shape();
  TORCH_CHECK(s.size() == 2 || s.size() == 3,
              "ConvNet: input_shape: expected (C, H, W) or (H, W), got ", c10::IntArrayRef(s));
  image_ = s.size() == 2 ? std::vector<int64_t>{1, s[0], s[1]} : s;
  TORCH_CHECK(std::all_of(image_.begin(), image_.end(), [](int64_t d) { return d > 0; }),
              "ConvNet: input_shape: expected positive sizes, got ", c10::IntArrayRef(s));
  TORCH_CHECK(options.out_features() > 0, "ConvNet: out_features: expected > 0, got ",
              options.out_features());
  TORCH_CHECK(!options.channels().empty(), "ConvNet: channels: expected at least one block");
  for (const int64_t c : options.channels())
    TORCH_CHECK(c > 0, "ConvNet: channels: expected positive widths, got ", c);
  for (const int64_t p : options.pool_after())
    TORCH_CHECK(p >= 1 && p <= static_cast<int64_t>(options.channels().size()),
                "ConvNet: pool_after: expected block numbers in 1..", options.channels().size(),
                ", got ", p);
  TORCH_CHECK(options.hidden() >= 0, "ConvNet: hidden: expected >= 0, got ", options.hidden());
  TORCH_CHECK(options.dropout() >= 0.0 && options.dropout() < 1.0,
              "ConvNet: dropout: expected a probability in [0, 1), got ", options.dropout());
  Activation(options.activation(), "ConvNet");  // checks it
  reset();
}

void ConvNetImpl::reset() {
  convs_ = register_module("convs", torch::nn::ModuleList());
  norms_ = register_module("norms", torch::nn::ModuleList());
  int64_t in = image_[0], h = image_[1], w = image_[2];
  const auto& pools = options.pool_after();
  for (size_t i = 0; i < options.channels().size(); ++i) {
    const int64_t out = options.channels()[i];
    // No bias: the batch norm's shift follows.
    convs_->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(false)));
    norms_->push_back(torch::nn::BatchNorm2d(out));
    in = out;
    if (std::count(pools.begin(), pools.end(), static_cast<int64_t>(i) + 1) > 0) {
      TORCH_CHECK(h >= 2 && w >= 2, "ConvNet: pool_after: block ", i + 1, " pools a ", h, "×", w,
                  " image; expected at least 2×2");
      h /= 2;
      w /= 2;
    }
  }
  const int64_t flat = in * h * w;
  if (options.hidden() > 0) {
    hidden_ = register_module("hidden", Linear(flat, options.hidden()));
    output_ = register_module("output", Linear(options.hidden(), options.out_features()));
  } else {
    output_ = register_module("output", Linear(flat, options.out_features()));
  }
  if (options.channels_last()) {
    // The filters in NHWC too, not only the images: with NCHW filters oneDNN reorders
    // them at every call, forward and backward. Measured with the eager twin of
    // configs/fashion_convnet.toml (bf16, batch 128, 2 threads): 36–40 ms a step with
    // channels-last filters, 52–61 ms without. AccumulateGrad gives their gradients
    // the same layout, and the optimizers keep their state in it (zeros_like, Preserve).
    // empty_like, not contiguous(): a filter of one input channel is contiguous in
    // both layouts, so contiguous(ChannelsLast) keeps its NCHW strides, and ATen then
    // runs the first block in NCHW (its batch norm too) and reorders between blocks.
    torch::NoGradGuard no_grad;
    for (auto& conv : *convs_) {
      auto& w = conv->as<torch::nn::Conv2d>()->weight;
      w.set_data(at::empty_like(w, at::MemoryFormat::ChannelsLast).copy_(w));
    }
  }
}

torch::Tensor ConvNetImpl::forward(torch::Tensor x) {
  const Activation act(options.activation(), "ConvNet");
  x = x.reshape({x.size(0), image_[0], image_[1], image_[2]});  // (B, C, H, W)
  if (options.channels_last()) x = x.contiguous(at::MemoryFormat::ChannelsLast);
  const auto& pools = options.pool_after();
  for (size_t i = 0; i < convs_->size(); ++i) {
    x = traced(*convs_[i], conv(i, x));
    x = traced(*norms_[i], norm_then(i, x, act));  // (B, C_i, H_i, W_i)
    if (std::count(pools.begin(), pools.end(), static_cast<int64_t>(i) + 1) > 0) x = pool(x);
  }
  if (options.channels_last() && x.requires_grad())
    // The flatten's backward hands the gradient back contiguous (NCHW); ATen's max-pool
    // backward (CUDA, KILN_CPU_MAX_POOL=aten), given that beside channels-last indices,
    // converts its operands to NCHW and its result back (three copies of up to 6.4 MB a
    // step at batch 128). Made channels-last here, the one copy is of the small pooled
    // gradient (kiln::max_pool2's backward would make the same copy itself).
    x.register_hook([](const at::Tensor& g) { return g.contiguous(at::MemoryFormat::ChannelsLast); });
  x = x.flatten(1);  // (B, C'·H'·W')
  if (hidden_) x = act.linear_then(*hidden_, x);  // (B, hidden)
  x = kiln::ops::random_dropout(x, options.dropout(), is_training());
  return traced(*this, output_->forward(x));  // (B, out_features)
}

// Under CPU autocast in bf16 or fp16, where kiln::linear runs such products as float32
// ones (ops::linear_reduced_in_float32(): a CPU without fast bf16 products), the
// convolution does the same: x and the filters rounded to autocast's dtype as autocast
// would (a half x stays as it is), cast up (exact), oneDNN's float32 convolution, the
// result rounded once — a native bf16 convolution's arithmetic (float32 sums of the
// rounded products), in another order, where oneDNN emulates bf16 on such a CPU
// (docs/models.md). Autograd sees the casts, so the gradients are rounded as a bf16
// convolution's are and the filters' cast back to float32. Elsewhere the module's own
// forward, which autocast runs in its dtype.
torch::Tensor ConvNetImpl::conv(size_t i, const torch::Tensor& x) {
  auto& c = *convs_[i]->as<torch::nn::Conv2d>();
  if (!x.is_cpu() || !at::autocast::is_autocast_enabled(at::kCPU) || !ops::linear_reduced_in_float32())
    return c.forward(x);
  const auto dtype = at::autocast::get_autocast_dtype(at::kCPU);
  if (dtype != at::kBFloat16 && dtype != at::kHalf) return c.forward(x);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  // kiln::cast both ways (ATen's rounding bit for bit, strides kept, its gradient cast
  // back), as kiln::linear's route casts.
  const auto rounded = [dtype](const torch::Tensor& t) {
    return ops::cast(t.scalar_type() == dtype ? t : ops::cast(t, dtype), at::kFloat);
  };
  const auto& o = c.options;
  auto options = torch::nn::functional::Conv2dFuncOptions().stride(o.stride()).padding(o.padding()).dilation(
      o.dilation()).groups(o.groups());
  if (c.bias.defined()) options.bias(rounded(c.bias));
  return ops::cast(torch::nn::functional::conv2d(rounded(x), rounded(c.weight), options), dtype);
}

namespace {

// Whether kiln's CPU batch norm and max-pool take x: on the CPU (or Meta), in float32 or
// a half type.
bool cpu_kernel_takes(const torch::Tensor& x) {
  const auto dt = x.scalar_type();
  return (x.is_cpu() || x.is_meta()) && (dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf);
}

}  // namespace

// kiln::ops::batch_norm on the CPU (and on Meta, where the summary estimates a step's
// memory) for float32 and half-type images with the module's float32 parameters and
// running statistics: two passes over the activations each way where ATen's batch norm
// and the ReLU after it took five, and one activation fewer kept for backward (the
// ReLU's mask is recomputed from the norm's input). The module's own arithmetic:
// num_batches_tracked counted in training, momentum (or, unset, the cumulative average
// 1/num_batches_tracked), eps. KILN_CPU_BATCH_NORM=aten keeps torch's module.
torch::Tensor ConvNetImpl::norm_then(size_t i, const torch::Tensor& x, const Activation& act) {
  static const bool allowed = util::env_switch("KILN_CPU_BATCH_NORM", {"auto", "aten"}) == 0;
  auto& bn = *norms_[i]->as<torch::nn::BatchNorm2d>();
  const bool kernel = allowed && cpu_kernel_takes(x) && bn.options.affine() && bn.options.track_running_stats() &&
                      bn.weight.scalar_type() == at::kFloat && bn.running_mean.scalar_type() == at::kFloat;
  if (!kernel) return act.apply(bn.forward(x));
  double momentum = bn.options.momentum().value_or(0.0);
  if (is_training()) {
    torch::NoGradGuard no_grad;
    bn.num_batches_tracked.add_(1);
    if (!bn.options.momentum()) momentum = 1.0 / bn.num_batches_tracked.item<double>();
  }
  const bool relu = act.options().name() == "relu";
  auto y = kiln::ops::batch_norm(x, bn.weight, bn.bias, bn.running_mean, bn.running_var, is_training(), momentum,
                                 bn.options.eps(), relu);
  return relu ? y : act.apply(y);
}

// The 2×2 max-pool: kiln::ops::max_pool2 on the CPU (and Meta) for float32 and the half
// types, one byte a window kept for backward and dx written once (1.5–1.6× ATen's at the
// first pool's shape, docs/ops.md); else ATen's max_pool2d. KILN_CPU_MAX_POOL=aten keeps
// ATen's.
torch::Tensor ConvNetImpl::pool(const torch::Tensor& x) const {
  static const bool allowed = util::env_switch("KILN_CPU_MAX_POOL", {"auto", "aten"}) == 0;
  if (allowed && cpu_kernel_takes(x)) return kiln::ops::max_pool2(x);
  return torch::max_pool2d(x, 2);
}

void ConvNetImpl::pretty_print(std::ostream& stream) const {
  stream << "kiln::nn::ConvNet(input=" << c10::IntArrayRef(image_) << ", channels="
         << c10::IntArrayRef(options.channels()) << ", pool_after="
         << c10::IntArrayRef(options.pool_after()) << ", hidden=" << options.hidden()
         << ", out=" << options.out_features() << ", activation=" << options.activation()
         << ", dropout=" << options.dropout()
         << (options.channels_last() ? ", channels_last" : "") << ")";
}

std::vector<std::string> ConvNetImpl::head_parameters() const {
  return parameter_names_of(*this, *output_);
}

}  // namespace kiln::nn
