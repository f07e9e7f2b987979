// Loads a Fashion-MNIST split and checks that its two files belong together.
#include "data/fashion_mnist.h"

#include <ATen/ATen.h>

#include <filesystem>

#include "data/idx.h"
#include "util/error.h"

namespace kiln::data {
namespace {

// The file of `stem` under root: gzipped as Debian ships it, or inflated.
std::string find_file(const std::string& root, const std::string& stem) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(root))
    throw InputError(c10::str(root, ": data.root: expected a directory with the Fashion-MNIST "
                              "IDX files, found none (install Debian's dataset-fashion-mnist)"));
  for (const auto& name : {stem + ".gz", stem}) {
    const auto p = fs::path(root) / name;
    if (fs::exists(p)) return p.string();
  }
  throw InputError(c10::str((fs::path(root) / (stem + ".gz")).string(),
                            ": no such file (nor an inflated ", stem, ")"));
}

}  // namespace

ImageSet load_fashion_mnist(const std::string& root, Split split, int64_t limit) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const auto images_path = find_file(root, prefix + "-images-idx3-ubyte");
  const auto labels_path = find_file(root, prefix + "-labels-idx1-ubyte");
  auto images = read_idx(images_path);
  auto labels = read_idx(labels_path);
  if (images.dim() != 3)
    throw InputError(c10::str(images_path, ": expected rank 3 (count, rows, columns), found rank ",
                              images.dim()));
  if (labels.dim() != 1)
    throw InputError(c10::str(labels_path, ": expected rank 1 (count), found rank ", labels.dim()));
  if (images.size(0) != labels.size(0))
    throw InputError(c10::str(labels_path, ": has ", labels.size(0), " labels but ", images_path,
                              " has ", images.size(0), " images"));
  const int64_t max_label = labels.max().item<int64_t>();
  if (max_label > 9)
    throw InputError(c10::str(labels_path, ": expected labels in 0..9, found ", max_label));
  if (limit > 0 && limit < images.size(0)) {
    images = images.narrow(0, 0, limit).clone();
    labels = labels.narrow(0, 0, limit);
  }
  return {images, labels.to(at::kLong)};
}

Normalization pixel_statistics(const at::Tensor& images) {
  const auto x = images.to(at::kDouble).div_(255.0);
  return {x.mean().item<double>(), x.std().item<double>()};
}

at::Tensor normalize_images(const at::Tensor& images, Normalization norm) {
  return images.reshape({images.size(0), -1})
      .to(at::kFloat)
      .div_(255.0)
      .sub_(norm.mean)
      .div_(norm.stddev);
}

}  // namespace kiln::data
