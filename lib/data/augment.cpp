// augment(): one generator per batch, seeded by (seed, epoch, batch index); every
// image gets its own flip and crop offset.
#include "data/augment.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

namespace kiln::data {

Batch augment(Batch b, const ImageAugment& o) {
  const auto& s = o.image();
  TORCH_CHECK(s.size() == 3, "augment: image: expected (C, H, W), got ", c10::IntArrayRef(s));
  const int64_t n = b.x.size(0), p = o.crop_padding();
  TORCH_CHECK(p >= 0, "augment: crop_padding: expected >= 0, got ", p);
  if (n == 0 || (!o.flip() && p == 0)) return b;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(
      mix_seed(o.seed() ^ mix_seed(static_cast<uint64_t>(b.epoch) ^
                                   mix_seed(static_cast<uint64_t>(b.index)))));
  const auto cpu_long = at::TensorOptions().dtype(at::kLong);
  const auto flips = o.flip() ? at::randint(2, {n}, gen, cpu_long) : at::zeros({n}, cpu_long);
  const auto offsets = at::randint(2 * p + 1, {n, 2}, gen, cpu_long);  // (dy, dx) per image
  const auto images = b.x.reshape({n, s[0], s[1], s[2]});            // (B, C, H, W)
  const auto padded = p > 0 ? at::constant_pad_nd(images, {p, p, p, p}, o.fill()) : images;
  auto out = at::empty_like(images, at::MemoryFormat::Contiguous);
  const auto* f = flips.data_ptr<int64_t>();
  const auto* off = offsets.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    auto crop = padded[i].narrow(1, off[2 * i], s[1]).narrow(2, off[2 * i + 1], s[2]);  // (C, H, W)
    out[i].copy_(f[i] ? crop.flip({2}) : crop);
  }
  b.x = out.reshape(b.x.sizes());
  return b;
}

}  // namespace kiln::data
