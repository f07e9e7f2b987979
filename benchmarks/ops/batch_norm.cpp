// batch_norm with its ReLU (training) against what kiln::nn::ConvNet ran before it:
// ATen's batch norm (at::batch_norm, oneDNN's or ATen's CPU kernel) and kiln::relu after
// it. "fwd": the forward alone; "train": forward and backward through autograd;
// "nchw-train": the same on contiguous (NCHW) images. The ConvNet's first block:
// channels-last (B, 32, 28, 28), n sets B = n / (32·28·28). float32 and the half types,
// on the CPU only.
#include <ATen/ops/batch_norm.h>
#include <torch/autograd.h>

#include <algorithm>

#include "cases.h"
#include "ops/ops.h"

KILN_BENCH_CASES(batch_norm) {
  if (options.dtype() == at::kDouble || !options.device().is_cpu()) return {};
  constexpr int64_t kC = 32, kHw = 28;
  const int64_t batch = std::max<int64_t>(2, n / (kC * kHw * kHw));
  const auto f32 = options.dtype(at::kFloat);
  const auto x = at::randn({batch, kC, kHw, kHw}, options).contiguous(at::MemoryFormat::ChannelsLast);
  const auto g = at::randn({batch, kC, kHw, kHw}, options).contiguous(at::MemoryFormat::ChannelsLast);
  const auto xn = x.contiguous(), gn = g.contiguous();
  const auto w = (at::rand({kC}, f32) + 0.5).requires_grad_(true), b = at::randn({kC}, f32).requires_grad_(true);
  const auto rm = at::zeros({kC}, f32), rv = at::ones({kC}, f32);
  const auto leaf = [](const at::Tensor& t) { return t.detach().requires_grad_(true); };
  const auto kiln_bn = [=](const at::Tensor& in) {
    auto m = rm, v = rv;  // handles of the same running statistics, updated in place
    return kiln::ops::batch_norm(in, w, b, m, v, true, 0.1, 1e-5, true);
  };
  const auto aten_bn = [=](const at::Tensor& in) {
    return kiln::ops::relu(at::batch_norm(in, w, b, rm, rv, true, 0.1, 1e-5, false));
  };
  return {
      {"batch_norm", "fwd", [=] { at::NoGradGuard no; kiln_bn(x); },
       [=] { at::NoGradGuard no; aten_bn(x); }},
      {"batch_norm", "train", [=] { kiln_bn(leaf(x)).backward(g); }, [=] { aten_bn(leaf(x)).backward(g); }},
      {"batch_norm", "nchw-train", [=] { kiln_bn(leaf(xn)).backward(gn); },
       [=] { aten_bn(leaf(xn)).backward(gn); }},
  };
}
