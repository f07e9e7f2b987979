// Fashion-MNIST (and MNIST) as tensors: the two IDX files of a split, checked
// against each other, and the normalisation the model trains on.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>

namespace kiln::data {

/// Where Debian's dataset-fashion-mnist package puts the files.
inline constexpr const char* kDefaultFashionMnistRoot = "/usr/share/datasets/fashion-mnist";

enum class Split { kTrain, kTest };

struct ImageSet {
  at::Tensor images;  // (N, H, W) uint8
  at::Tensor labels;  // (N) int64, each in 0..9
};

/// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from `root`; keeps the
/// first `limit` examples when limit > 0. Throws kiln::InputError for a missing
/// file, a count mismatch or a label outside 0..9.
/// Example: auto test = load_fashion_mnist(kDefaultFashionMnistRoot, Split::kTest);
ImageSet load_fashion_mnist(const std::string& root, Split split, int64_t limit = 0);

struct Normalization {
  double mean = 0.0;
  double stddev = 1.0;
};

/// Mean and standard deviation of the pixels scaled to [0, 1].
Normalization pixel_statistics(const at::Tensor& images);

/// (N, H, W) uint8 → (N, H·W) float32, (x/255 − mean)/std.
at::Tensor normalize_images(const at::Tensor& images, Normalization norm);

}  // namespace kiln::data
