// max_pool2 against ATen's max_pool2d(x, 2), which kiln::nn::ConvNet ran before it:
// "fwd" the forward alone, "train" forward and backward through autograd, on the
// ConvNet's first pooled activations, channels-last (B, 32, 28, 28), B = n / (32·28·28);
// "nchw-train" the same on contiguous images. float32 and the half types, CPU only.
#include <ATen/ops/max_pool2d.h>
#include <torch/autograd.h>

#include <algorithm>

#include "cases.h"
#include "ops/ops.h"

KILN_BENCH_CASES(max_pool2) {
  if (options.dtype() == at::kDouble || !options.device().is_cpu()) return {};
  constexpr int64_t kC = 32, kHw = 28;
  const int64_t batch = std::max<int64_t>(1, n / (kC * kHw * kHw));
  const auto x = at::randn({batch, kC, kHw, kHw}, options).contiguous(at::MemoryFormat::ChannelsLast);
  const auto g = at::randn({batch, kC, kHw / 2, kHw / 2}, options).contiguous(at::MemoryFormat::ChannelsLast);
  const auto xn = x.contiguous(), gn = g.contiguous();
  const auto leaf = [](const at::Tensor& t) { return t.detach().requires_grad_(true); };
  return {
      {"max_pool2", "fwd", [=] { at::NoGradGuard no; kiln::ops::max_pool2(x); },
       [=] { at::NoGradGuard no; at::max_pool2d(x, {2, 2}); }},
      {"max_pool2", "train", [=] { kiln::ops::max_pool2(leaf(x)).backward(g); },
       [=] { at::max_pool2d(leaf(x), {2, 2}).backward(g); }},
      {"max_pool2", "nchw-train", [=] { kiln::ops::max_pool2(leaf(xn)).backward(gn); },
       [=] { at::max_pool2d(leaf(xn), {2, 2}).backward(gn); }},
  };
}
