// Image augmentation for training batches — a random crop after padding and a
// horizontal flip — drawn from a generator seeded by (seed, epoch, batch), so a
// resumed run augments every batch exactly as a straight one does.
#pragma once
#include <torch/arg.h>

#include <vector>

#include "data/loader.h"

namespace kiln::data {

struct ImageAugment {
  explicit ImageAugment(std::vector<int64_t> image) : image_(std::move(image)) {}
  /// One image, (C, H, W): a batch's x (B, C·H·W) or (B, C, H, W) is viewed so.
  TORCH_ARG(std::vector<int64_t>, image);
  /// Mirror each image left to right with probability 1/2.
  TORCH_ARG(bool, flip) = false;
  /// Pad each side by this many pixels and crop the image's size back at a random offset; 0: no crop.
  TORCH_ARG(int64_t, crop_padding) = 0;
  /// The padding's value, as the model sees inputs (a black pixel after normalisation).
  TORCH_ARG(double, fill) = 0.0;
  TORCH_ARG(uint64_t, seed) = 0;
};

/// The batch with each image augmented; b's tensors are not changed (they may be
/// views of the data set). Example: batch = augment(std::move(batch), ImageAugment({1, 28, 28}).flip(true));
Batch augment(Batch b, const ImageAugment& options);

namespace detail {
/// augment()'s map with its draws given: out[i, c, y, x] = images[i, c, y + dy - p,
/// (flip ? W-1-x : x) + dx - p], `fill` where that is outside the image; images (n, C,
/// H, W) of any dtype, flips (n) of 0/1, offsets (n, 2) of (dy, dx) in [0, 2p]. One
/// pass on the CPU (any element size), a gather and a masked fill elsewhere.
at::Tensor crop_flip(const at::Tensor& images, const at::Tensor& flips, const at::Tensor& offsets,
                     int64_t p, double fill);
/// The gather form on any device (crop_flip's path off the CPU; tests run it on the CPU).
at::Tensor crop_flip_indexed(const at::Tensor& images, const at::Tensor& flips,
                             const at::Tensor& offsets, int64_t p, double fill);
}  // namespace detail

}  // namespace kiln::data
