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
