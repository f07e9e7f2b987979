// Loads a Fashion-MNIST split and checks that its two files belong together.
#include "data/fashion_mnist.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <filesystem>

#include "data/idx.h"
#include "ops/cpu_capability.h"
#include "util/error.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln::data {
namespace {

// dst[i] = table[src[i]], the table's 256 floats: a scalar loop, or where the CPU has
// AVX2 (and KILN_CPU_CAPABILITY allows it) AVX2's gather, 8 lookups an instruction.
// Written here rather than as a kiln:: op's per-capability kernel: one loop, no
// dispatcher entry, and the data layer must not depend on which ops a build has
// (KILN_ONLY_OPS). On the 2-core Intel Xeon (2026-12-07, a standalone C++ loop) a
// batch of 32 images (25,088 pixels) took 6.0-6.4 µs against 8.4-16.8 µs scalar, 128
// images 19-25 against 34-48 µs (docs/performance.md).
void lookup_scalar(const uint8_t* src, const float* table, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = table[src[i]];
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void lookup_avx2(const uint8_t* src, const float* table, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i lo = _mm256_cvtepu8_epi32(bytes), hi = _mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8));
    _mm256_storeu_ps(dst + i, _mm256_i32gather_ps(table, lo, 4));
    _mm256_storeu_ps(dst + i + 8, _mm256_i32gather_ps(table, hi, 4));
  }
  lookup_scalar(src + i, table, dst + i, n - i);
}
#endif

using LookupFn = void (*)(const uint8_t*, const float*, float*, int64_t);

LookupFn lookup_fn() {
#if defined(__x86_64__)
  if (ops::cpu_capability() >= ops::CpuCapability::kAvx2) return &lookup_avx2;
#endif
  return &lookup_scalar;
}

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
  // From a histogram of the 256 byte values, exact counts, instead of the pixels in
  // double precision: the same mean and deviation (to the last bits) without a
  // temporary of 8 bytes a pixel (376 MB for Fashion-MNIST's training set, the
  // largest allocation of the default run's setup) and in a fraction of the time.
  TORCH_CHECK(images.scalar_type() == at::kByte, "pixel_statistics: expected uint8 images, got ",
              images.scalar_type());
  const auto bytes = images.contiguous();
  const int64_t n = bytes.numel();
  TORCH_CHECK(n > 1, "pixel_statistics: expected at least 2 pixels, got ", n);
  // Four histograms, so that a run of equal bytes does not wait on one counter.
  std::array<std::array<int64_t, 256>, 4> part{};
  const uint8_t* p = bytes.data_ptr<uint8_t>();
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    ++part[0][p[i]];
    ++part[1][p[i + 1]];
    ++part[2][p[i + 2]];
    ++part[3][p[i + 3]];
  }
  for (; i < n; ++i) ++part[0][p[i]];
  std::array<int64_t, 256> count{};
  int64_t sum = 0;  // at most 255 · n: exact in 64 bits
  for (int v = 0; v < 256; ++v) {
    count[v] = part[0][v] + part[1][v] + part[2][v] + part[3][v];
    sum += count[v] * v;
  }
  const double mean = static_cast<double>(sum) / static_cast<double>(n) / 255.0;
  double squares = 0.0;
  for (int v = 0; v < 256; ++v) {
    const double d = v / 255.0 - mean;
    squares += static_cast<double>(count[v]) * d * d;
  }
  return {mean, std::sqrt(squares / static_cast<double>(n - 1))};  // the unbiased deviation, as at::std
}

at::Tensor normalize_images(const at::Tensor& images, Normalization norm) {
  return images.reshape({images.size(0), -1})
      .to(at::kFloat)
      .div_(255.0)
      .sub_(norm.mean)
      .div_(norm.stddev);
}

at::Tensor decode_pixels(const at::Tensor& pixels, Normalization norm) {
  TORCH_CHECK(pixels.scalar_type() == at::kByte, "decode_pixels: expected uint8 pixels, got ",
              pixels.scalar_type());
  if (!pixels.device().is_cpu())  // one pass of each op over the batch (a launch each on CUDA)
    return normalize_images(pixels.reshape({pixels.numel(), 1}), norm).view(pixels.sizes());
  // The 256 values normalize_images gives, made by it (so equal to its output bit for
  // bit) once per normalisation and thread; then one table lookup a pixel.
  struct Table {
    double mean = 0.0, stddev = 0.0;
    std::array<float, 256> value{};
  };
  thread_local std::optional<Table> table;
  if (!table || table->mean != norm.mean || table->stddev != norm.stddev) {
    const auto all = normalize_images(at::arange(256, at::TensorOptions().dtype(at::kByte)).view({256, 1}), norm);
    table = Table{norm.mean, norm.stddev, {}};
    std::memcpy(table->value.data(), all.const_data_ptr<float>(), sizeof(float) * 256);
  }
  const auto in = pixels.contiguous();
  auto out = at::empty(pixels.sizes(), at::TensorOptions().dtype(at::kFloat));
  const uint8_t* src = in.const_data_ptr<uint8_t>();
  float* dst = out.mutable_data_ptr<float>();
  const float* value = table->value.data();
  static const LookupFn lookup = lookup_fn();
  at::parallel_for(0, in.numel(), 1 << 15,
                   [&](int64_t begin, int64_t end) { lookup(src + begin, value, dst + begin, end - begin); });
  return out;
}

}  // namespace kiln::data
