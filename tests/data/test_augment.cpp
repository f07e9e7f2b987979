// Image augmentation: a flip mirrors, a crop after padding shifts the image within
// the padding's fill, every draw is a function of (seed, epoch, batch index) alone,
// and the data set's own tensors are never changed.
#include <torch/torch.h>

#include "data/augment.h"
#include "support.h"

using kiln::data::augment;
using kiln::data::Batch;
using kiln::data::ImageAugment;

TEST_CASE("augment: flips mirror, crops shift within the fill, draws follow (seed, epoch, batch)",
          "[data][augment]") {
  const auto images = at::arange(64 * 2 * 5 * 6, at::kFloat).reshape({64, 2 * 5 * 6});  // flat (B, C·H·W)
  const auto before = images.clone();
  Batch b{images, at::zeros({64}, at::kLong), /*epoch=*/3, /*index=*/7};

  const auto flipped = augment(b, ImageAugment({2, 5, 6}).flip(true).seed(1));
  REQUIRE(at::equal(images, before));  // the input is not written
  const auto x = images.reshape({64, 2, 5, 6}), f = flipped.x.reshape({64, 2, 5, 6});
  int64_t mirrored = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const bool same = at::equal(f[i], x[i]), mirror = at::equal(f[i], x[i].flip({2}));
    REQUIRE((same || mirror));
    mirrored += mirror;
  }
  CHECK(mirrored > 16);  // about half of 64
  CHECK(mirrored < 48);

  const auto cropped = augment(b, ImageAugment({2, 5, 6}).crop_padding(2).fill(-9).seed(1));
  const auto c = cropped.x.reshape({64, 2, 5, 6});
  int64_t shifted = 0;
  for (int64_t i = 0; i < 64; ++i) {
    // Some window of the padded image, whose inner values are the image's own.
    const auto padded = at::constant_pad_nd(x[i], {2, 2, 2, 2}, -9);
    bool found = false;
    for (int64_t dy = 0; dy <= 4 && !found; ++dy)
      for (int64_t dx = 0; dx <= 4 && !found; ++dx)
        found = at::equal(c[i], padded.narrow(1, dy, 5).narrow(2, dx, 6));
    REQUIRE(found);
    shifted += !at::equal(c[i], x[i]);
  }
  CHECK(shifted > 40);  // 24 of 25 offsets move the image

  // The same (seed, epoch, index): the same batch; another index or seed: another.
  const auto o = ImageAugment({2, 5, 6}).flip(true).crop_padding(2).seed(5);
  REQUIRE(at::equal(augment(b, o).x, augment(b, o).x));
  Batch other = b;
  other.index = 8;
  REQUIRE_FALSE(at::equal(augment(other, o).x, augment(b, o).x));
  REQUIRE_FALSE(at::equal(augment(b, ImageAugment(o).seed(6)).x, augment(b, o).x));
  // Nothing asked: the batch as it is.
  REQUIRE(augment(b, ImageAugment({2, 5, 6})).x.is_same(images));
}

TEST_CASE("augment: the one-pass map and its gather form equal per-image crops and flips, every element size",
          "[data][augment]") {
  using kiln::data::detail::crop_flip;
  using kiln::data::detail::crop_flip_indexed;
  const int64_t n = 12, c = 2, h = 5, w = 6;
  for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf, at::kByte, at::kShort, at::kDouble,
                           at::kLong, at::kComplexDouble}) {
    for (const int64_t p : {0, 1, 3, 7}) {  // 7 > W: some images are all fill
      CAPTURE(dtype, p);
      at::manual_seed(p);
      const auto images = at::randint(0, 100, {n, c, h, w}).to(dtype);
      const auto flips = at::randint(2, {n}, at::kLong);
      const auto offsets = at::randint(2 * p + 1, {n, 2}, at::kLong);
      const double fill = 7;
      auto expected = at::empty_like(images);
      for (int64_t i = 0; i < n; ++i) {
        const auto crop = at::constant_pad_nd(images[i], {p, p, p, p}, fill)
                              .narrow(1, offsets[i][0].item<int64_t>(), h)
                              .narrow(2, offsets[i][1].item<int64_t>(), w);
        expected[i].copy_(flips[i].item<int64_t>() ? crop.flip({2}) : crop);
      }
      REQUIRE(at::equal(crop_flip(images, flips, offsets, p, fill), expected));
      REQUIRE(at::equal(crop_flip_indexed(images, flips, offsets, p, fill), expected));
      // Channels-last images (a copy first) give the same contiguous result.
      const auto strided = images.contiguous(at::MemoryFormat::ChannelsLast);
      REQUIRE(at::equal(crop_flip(strided, flips, offsets, p, fill), expected));
    }
  }
}

TEST_CASE("augment: a batch costs the same few operations whatever its size", "[data][augment]") {
  // Per-image crops and flips dispatched four ATen operations an image (512 kernel
  // launches a batch of 128 on CUDA, 1.4 ms on the CPU).
  static thread_local int64_t calls = 0;
  const auto handle = at::addThreadLocalCallback(at::RecordFunctionCallback(
      [](const at::RecordFunction&) -> std::unique_ptr<at::ObserverContext> {
        ++calls;
        return nullptr;
      }));
  const auto o = ImageAugment({1, 28, 28}).flip(true).crop_padding(2).seed(3);
  std::vector<int64_t> counted;
  for (const int64_t n : {4, 128}) {
    const Batch b{at::randn({n, 784}), at::zeros({n}, at::kLong), 0, 1};
    calls = 0;
    (void)augment(b, o);
    counted.push_back(calls);
  }
  at::removeCallback(handle);
  CAPTURE(counted);
  REQUIRE(counted[0] > 0);
  REQUIRE(counted[1] == counted[0]);
}
