// Histograms computed on the tensor's device (aminmax, histc), a few numbers and
// `bins` counts copied back.
#include "train/histograms.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "util/log.h"

namespace kiln::train {

TensorHistogram tensor_histogram(const at::Tensor& values, int64_t bins) {
  TensorHistogram out;
  auto v = values.detach().reshape(-1).to(at::kDouble);
  const auto finite = v.isfinite();
  const int64_t n = finite.sum().item<int64_t>();
  out.non_finite = v.numel() - n;
  if (out.non_finite > 0) v = v.masked_select(finite);
  auto& h = out.histogram;
  if (n == 0) return out;  // no finite values: an empty histogram
  const auto [lo, hi] = at::aminmax(v);
  h.min = lo.item<double>();
  h.max = hi.item<double>();
  h.num = static_cast<double>(n);
  h.sum = v.sum().item<double>();
  h.sum_squares = v.square().sum().item<double>();
  if (h.max == h.min) {
    h.bucket_limit = {h.max};
    h.bucket = {h.num};
    return out;
  }
  const auto counts = at::histc(v, bins, h.min, h.max).cpu();
  const auto* c = counts.data_ptr<double>();
  const double width = (h.max - h.min) / static_cast<double>(bins);
  for (int64_t i = 0; i < bins; ++i) {
    h.bucket_limit.push_back(i + 1 == bins ? h.max : h.min + width * static_cast<double>(i + 1));
    h.bucket.push_back(c[i]);
  }
  return out;
}

void write_histograms(tfevents::EventWriter& writer, const torch::nn::Module& model, int64_t step) {
  int64_t non_finite = 0;
  for (const auto& p : model.named_parameters()) {
    const auto w = tensor_histogram(p.value());
    writer.histogram("weights/" + p.key(), step, w.histogram);
    non_finite += w.non_finite;
    if (p.value().grad().defined()) {
      const auto g = tensor_histogram(p.value().grad());
      writer.histogram("grads/" + p.key(), step, g.histogram);
      non_finite += g.non_finite;
    }
  }
  writer.flush();
  if (non_finite > 0)
    log::warn("histograms at step " + std::to_string(step) + ": " + std::to_string(non_finite) +
              " inf/NaN values left out");
}

}  // namespace kiln::train
