// Weight and gradient histograms for TensorBoard (RUN/tb/, tensorboard.histogram_every).
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>

#include "util/tfevents.h"

namespace kiln::train {

/// The HistogramProto of `values`' finite elements (inf and NaN are left out, and
/// counted in the return's `non_finite`): `bins` equal buckets from the least to the
/// greatest value (one bucket when all are equal). Example: auto h = tensor_histogram(w, 64);
struct TensorHistogram {
  tfevents::Histogram histogram;
  int64_t non_finite = 0;
};
TensorHistogram tensor_histogram(const at::Tensor& values, int64_t bins = 64);

/// Writes "weights/<name>" and, where a gradient exists, "grads/<name>" for every
/// parameter of `model` at `step`. Example: write_histograms(writer, *model, 100);
void write_histograms(tfevents::EventWriter& writer, const torch::nn::Module& model, int64_t step);

}  // namespace kiln::train
