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

/// Pixels of any shape, uint8 → float32 of the same shape, each value bit for bit as
/// normalize_images makes it. The data set stays uint8 (a quarter of float32's bytes:
/// 47 MB for Fashion-MNIST's training images, whose float32 copy took about half a
/// second of the default run's start in page faults alone) and each batch is decoded
/// as the model takes it: on the CPU through a table of the 256 values, elsewhere by
/// normalize_images' own operations. Example: auto x = decode_pixels(batch, norm);
at::Tensor decode_pixels(const at::Tensor& pixels, Normalization norm);

}  // namespace kiln::data
