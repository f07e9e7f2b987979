// The IDX reader: good files (gzip and plain) round-trip; truncated, foreign and
// over-long files are errors that name the file and the problem.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>
#include <sys/stat.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "data/dataset.h"
#include "data/fashion_mnist.h"
#include "data/csv.h"
#include "data/idx.h"
#include "data/npy.h"
#include "data/text.h"
#include "data/loader.h"
#include "support.h"
#include "util/error.h"

using kiln::InputError;
using kiln::data::read_idx;
using kiln::data::write_idx;

namespace {

at::Tensor random_bytes(std::vector<int64_t> shape) {
  return torch::randint(0, 256, shape, torch::TensorOptions().dtype(torch::kByte));
}

void write_raw(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("IDX files round-trip, gzipped and plain", "[data][idx]") {
  kiln::test::TempDir dir;
  // {700, 28, 28}: 548,800 bytes, read from a gzip stream straight into the tensor (it
  // could hold them: no stream inflates past 1,032 times its size); a stream that
  // could not (the liar's below) is read into a buffer that grows with what arrives.
  for (const auto& shape :
       std::vector<std::vector<int64_t>>{{17}, {5, 28, 28}, {3, 2, 4, 5}, {700, 28, 28}}) {
    for (const std::string name : {"x.idx", "x.idx.gz"}) {
      const auto t = random_bytes(shape);
      write_idx(dir / name, t);
      const auto back = read_idx(dir / name);
      REQUIRE(back.sizes() == t.sizes());
      REQUIRE(torch::equal(back, t));
    }
  }
}

TEST_CASE("a truncated IDX file is an error naming the file", "[data][idx]") {
  kiln::test::TempDir dir;
  write_idx(dir / "full.idx", random_bytes({10, 4, 4}));
  auto bytes = read_raw(dir / "full.idx");
  bytes.resize(bytes.size() - 7);
  write_raw(dir / "cut.idx", bytes);
  REQUIRE_THROWS_MATCHES(read_idx(dir / "cut.idx"), InputError,
                         Catch::Message(dir / "cut.idx" +
                                        ": truncated: the header declares 160 data bytes "
                                        "(shape [10, 4, 4]), the file has 153"));
  // Inside the header.
  bytes.resize(6);
  write_raw(dir / "header.idx", bytes);
  REQUIRE_THROWS_WITH(read_idx(dir / "header.idx"), Catch::Contains("ends inside the header"));
  // A gzip stream cut short.
  write_idx(dir / "full.idx.gz", random_bytes({50, 8, 8}));
  auto gz = read_raw(dir / "full.idx.gz");
  gz.resize(gz.size() / 2);
  write_raw(dir / "cut.idx.gz", gz);
  REQUIRE_THROWS_WITH(read_idx(dir / "cut.idx.gz"),
                      Catch::StartsWith(dir / "cut.idx.gz") && Catch::Contains("truncated"));
  // A gzip stream damaged inside its deflate data: zlib's words, the path said once.
  gz = read_raw(dir / "full.idx.gz");
  for (size_t i = 30; i < 38; ++i) gz[i] ^= 0xff;
  write_raw(dir / "bad.idx.gz", gz);
  REQUIRE_THROWS_WITH(read_idx(dir / "bad.idx.gz"),
                      Catch::StartsWith(dir / "bad.idx.gz" + ": expected an IDX file, plain or "
                                        "gzip-compressed, found a damaged gzip stream (zlib: ") &&
                          !Catch::Contains("(zlib: " + dir / "bad.idx.gz"));
}

TEST_CASE("a header declaring more than the file holds is refused before the tensor is made",
          "[data][idx]") {
  // 4 GiB declared, 3 bytes there (the fuzzer's first find: the reader allocated the
  // declared size first; tests/fuzz/regressions/idx holds it for the allocation limit).
  kiln::test::TempDir dir;
  write_raw(dir / "liar.idx", {0, 0, 8, 1, 0xff, 0xff, 0xff, 0xff, 1, 2, 3});
  REQUIRE_THROWS_MATCHES(read_idx(dir / "liar.idx"), InputError,
                         Catch::Message(dir / "liar.idx" +
                                        ": truncated: the header declares 4294967295 data bytes "
                                        "(shape [4294967295]), the file has 3"));
  const std::vector<uint8_t> liar = read_raw(dir / "liar.idx");
  gzFile gz = gzopen((dir / "liar.idx.gz").c_str(), "wb");
  REQUIRE(gzwrite(gz, liar.data(), static_cast<unsigned>(liar.size())) == static_cast<int>(liar.size()));
  gzclose(gz);
  REQUIRE_THROWS_MATCHES(read_idx(dir / "liar.idx.gz"), InputError,
                         Catch::Message(dir / "liar.idx.gz" +
                                        ": truncated: the header declares 4294967295 data bytes "
                                        "(shape [4294967295]), the file has 3"));
}

TEST_CASE("a wrong magic number or data type is an error", "[data][idx]") {
  kiln::test::TempDir dir;
  write_raw(dir / "png.idx", {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a});
  REQUIRE_THROWS_WITH(read_idx(dir / "png.idx"),
                      Catch::Contains("png.idx: expected an IDX magic number") &&
                          Catch::Contains("found 0x89504e47"));
  write_raw(dir / "float.idx", {0, 0, 0x0D, 1, 0, 0, 0, 1, 0, 0, 0, 0});
  REQUIRE_THROWS_WITH(read_idx(dir / "float.idx"),
                      Catch::Contains("expected IDX data type 0x08 (unsigned byte), found 0xd"));
  write_raw(dir / "empty.idx", {});
  REQUIRE_THROWS_WITH(read_idx(dir / "empty.idx"), Catch::Contains("magic number"));
  REQUIRE_THROWS_WITH(read_idx(dir / "missing.idx"), Catch::Contains("missing.idx: no such file"));
}

TEST_CASE("data past the declared size is an error", "[data][idx]") {
  kiln::test::TempDir dir;
  write_idx(dir / "x.idx", random_bytes({4}));
  auto bytes = read_raw(dir / "x.idx");
  bytes.push_back(0);
  write_raw(dir / "long.idx", bytes);
  REQUIRE_THROWS_WITH(read_idx(dir / "long.idx"), Catch::Contains("has data past the 4 bytes"));
}

TEST_CASE("a Fashion-MNIST folder whose files disagree is an error", "[data][fashion]") {
  kiln::test::TempDir dir;
  write_idx(dir / "t10k-images-idx3-ubyte.gz", random_bytes({6, 28, 28}));
  write_idx(dir / "t10k-labels-idx1-ubyte", torch::randint(0, 10, {5}, torch::kByte));
  REQUIRE_THROWS_WITH(kiln::data::load_fashion_mnist(dir.path(), kiln::data::Split::kTest),
                      Catch::Contains("has 5 labels but") && Catch::Contains("has 6 images"));
  write_idx(dir / "t10k-labels-idx1-ubyte", torch::full({6}, 12, torch::kByte));
  REQUIRE_THROWS_WITH(kiln::data::load_fashion_mnist(dir.path(), kiln::data::Split::kTest),
                      Catch::Contains("expected labels in 0..9, found 12"));
  write_idx(dir / "t10k-labels-idx1-ubyte", torch::randint(0, 10, {6}, torch::kByte));
  const auto set = kiln::data::load_fashion_mnist(dir.path(), kiln::data::Split::kTest, 4);
  REQUIRE(set.images.sizes() == torch::IntArrayRef({4, 28, 28}));
  REQUIRE(set.labels.scalar_type() == torch::kLong);
}

TEST_CASE("IDX test images of another size than the training images are refused before training",
          "[data][fashion]") {
  kiln::test::TempDir dir;
  write_idx(dir / "train-images-idx3-ubyte", random_bytes({8, 28, 28}));
  write_idx(dir / "train-labels-idx1-ubyte", torch::randint(0, 10, {8}, torch::kByte));
  write_idx(dir / "t10k-images-idx3-ubyte", random_bytes({4, 10, 10}));
  write_idx(dir / "t10k-labels-idx1-ubyte", torch::randint(0, 10, {4}, torch::kByte));
  const auto options = kiln::data::DataOptions().root(dir.path());
  REQUIRE_THROWS_AS(kiln::data::load_data(options), InputError);
  REQUIRE_THROWS_WITH(kiln::data::load_data(options),
                      Catch::Equals(dir / "t10k-images-idx3-ubyte" +
                                    ": expected images of 28×28 (the training images'), found 10×10"));
  // On a resume, the size the run's model was built for.
  write_idx(dir / "t10k-images-idx3-ubyte", random_bytes({4, 28, 28}));
  auto schema = kiln::data::load_data(options).schema;
  schema.input_shape = {1, 14, 14};
  REQUIRE_THROWS_WITH(kiln::data::load_data(options, &schema),
                      Catch::Equals(dir / "train-images-idx3-ubyte" +
                                    ": expected images of 14×14 (the run's data.json), found 28×28"));
}

TEST_CASE("a data file that is not a regular file is refused before it is read", "[data][files]") {
  kiln::test::TempDir dir;
  const std::string fifo = dir / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // A FIFO without a writer: opening it to read would wait for ever; /dev/zero never ends.
  REQUIRE_THROWS_WITH(read_idx(fifo), Catch::Equals(fifo + ": expected a regular IDX file, found a FIFO (named pipe)"));
  REQUIRE_THROWS_WITH(read_idx("/dev/zero"),
                      Catch::Equals("/dev/zero: expected a regular IDX file, found a character device"));
  REQUIRE_THROWS_WITH(kiln::data::read_npy(fifo), Catch::Contains(fifo + ": expected a regular .npy file, found a FIFO"));
  REQUIRE_THROWS_WITH(kiln::data::read_csv("/dev/zero", {}),
                      Catch::Equals("/dev/zero: expected a regular CSV file, found a character device"));
  REQUIRE_THROWS_WITH(kiln::data::read_text("/dev/zero", {}, true),
                      Catch::Equals("/dev/zero: expected a regular text file, found a character device"));
  REQUIRE_THROWS_WITH(kiln::data::read_text(fifo, {}, true),
                      Catch::Equals(fifo + ": expected a regular text file, found a FIFO (named pipe)"));
}

TEST_CASE("pixel statistics from the byte histogram equal the double-precision mean and deviation",
          "[data][fashion]") {
  // Skewed like images (most pixels 0), odd counts so the unrolled loop has a tail,
  // a non-contiguous view (a transposed set), and a constant image set (deviation 0).
  for (const int64_t count : {int64_t{1}, int64_t{7}, int64_t{1000}}) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(count);
    auto values = at::randint(0, 256, {count, 5, 7}, gen, at::kByte);
    values.masked_fill_(at::rand({count, 5, 7}, gen) < 0.6, 0);
    for (const auto& images : {values, values.transpose(1, 2)}) {
      const auto x = images.to(at::kDouble).div(255.0);
      const auto norm = kiln::data::pixel_statistics(images);
      INFO(count);
      CHECK(norm.mean == Approx(x.mean().item<double>()).epsilon(1e-13));
      CHECK(norm.stddev == Approx(x.std().item<double>()).epsilon(1e-12));
    }
  }
  const auto flat = kiln::data::pixel_statistics(at::full({4, 2, 2}, 51, at::kByte));
  CHECK(flat.mean == Approx(0.2));
  CHECK(flat.stddev == 0.0);
  CHECK_THROWS_WITH(kiln::data::pixel_statistics(at::zeros({4, 2, 2})), Catch::Contains("expected uint8 images"));
}

TEST_CASE("the loader's order depends only on seed and epoch", "[data][loader]") {
  const auto x = torch::arange(103).reshape({103, 1}).to(torch::kFloat);
  const auto y = torch::arange(103);
  kiln::data::BatchLoader a(x, y, 10, true, 7), b(x, y, 10, true, 7);
  REQUIRE(a.size() == 11);
  a.set_epoch(3);
  b.set_epoch(1);
  b.set_epoch(3);
  std::vector<int64_t> seen;
  for (int64_t i = 0; i < a.size(); ++i) {
    const auto ba = a.batch(i), bb = b.batch(i);
    REQUIRE(torch::equal(ba.y, bb.y));
    REQUIRE(torch::equal(ba.x.squeeze(1).to(torch::kLong), ba.y));
    for (int64_t j = 0; j < ba.y.size(0); ++j) seen.push_back(ba.y[j].item<int64_t>());
  }
  std::sort(seen.begin(), seen.end());
  REQUIRE(seen == std::vector<int64_t>(y.data_ptr<int64_t>(), y.data_ptr<int64_t>() + 103));
  a.set_epoch(4);
  REQUIRE_FALSE(torch::equal(a.batch(0).y, b.batch(0).y));
}

TEST_CASE("the loader's batches are the drawn rows, whatever the dtype, row shape and layout", "[data][loader]") {
  // Every batch is checked against index_select of its labels (y = the example's
  // index); a non-contiguous x takes ATen's gather and must give the same batches as
  // the contiguous one (kiln's own row copy).
  const auto y = torch::arange(57);
  for (const auto dtype : {torch::kFloat, torch::kByte, torch::kLong, torch::kBFloat16}) {
    for (const auto& row : {std::vector<int64_t>{}, std::vector<int64_t>{3}, std::vector<int64_t>{2, 5}}) {
      INFO("dtype " << dtype << ", row shape " << torch::IntArrayRef(row));
      auto shape = row;
      shape.insert(shape.begin(), 57);
      int64_t per_row = 1;
      for (const auto d : row) per_row *= d;
      const auto x = (torch::arange(57 * per_row) % 256).reshape(shape).to(dtype);
      const auto strided = torch::stack({x, x}, -1).select(-1, 0);  // every stride doubled
      REQUIRE_FALSE(strided.is_contiguous());
      REQUIRE(torch::equal(strided, x));
      kiln::data::BatchLoader a(x, y, 8, true, 3), b(strided, y, 8, true, 3);
      a.set_epoch(2);
      b.set_epoch(2);
      std::vector<int64_t> seen;
      for (int64_t i = 0; i < a.size(); ++i) {
        const auto ba = a.batch(i), bb = b.batch(i);
        REQUIRE(ba.x.is_contiguous());
        REQUIRE(torch::equal(ba.x, bb.x));
        REQUIRE(torch::equal(ba.y, bb.y));
        REQUIRE(torch::equal(ba.x, x.index_select(0, ba.y)));
        for (int64_t j = 0; j < ba.y.size(0); ++j) seen.push_back(ba.y[j].item<int64_t>());
      }
      std::sort(seen.begin(), seen.end());
      REQUIRE(seen == std::vector<int64_t>(y.data_ptr<int64_t>(), y.data_ptr<int64_t>() + 57));
    }
  }
}

// idx data stays uint8 (a quarter of float32's memory, no float copy made at start);
// each batch is decoded as the model takes it, bit for bit the values the float32 data
// set held: a table of the 256 values on the CPU, normalize_images' operations elsewhere.
TEST_CASE("decoded pixels equal normalize_images bit for bit, any shape and layout", "[data][fashion]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const auto images = at::randint(0, 256, {37, 9, 13}, gen, at::kByte);
  for (const kiln::data::Normalization norm : {kiln::data::Normalization{0.2860, 0.3530}, {0.1307, 0.3081}, {0.0, 1.0}}) {
    INFO(norm.mean << " " << norm.stddev);
    const auto want = kiln::data::normalize_images(images, norm);  // (37, 117)
    const auto all = kiln::data::decode_pixels(at::arange(256, at::kByte), norm);
    REQUIRE(at::equal(all, kiln::data::normalize_images(at::arange(256, at::kByte).view({256, 1, 1}), norm).view(256)));
    const auto flat = images.reshape({37, -1});
    REQUIRE(at::equal(kiln::data::decode_pixels(flat, norm), want));
    const auto cube = kiln::data::decode_pixels(images, norm);  // the shape is kept
    REQUIRE(cube.sizes() == images.sizes());
    REQUIRE(at::equal(cube.reshape({37, -1}), want));
    REQUIRE(at::equal(kiln::data::decode_pixels(images.transpose(1, 2), norm), cube.transpose(1, 2)));
    const auto meta = kiln::data::decode_pixels(flat.to(at::kMeta), norm);  // ATen's ops off the CPU
    REQUIRE(meta.sizes() == flat.sizes());
    REQUIRE(meta.scalar_type() == at::kFloat);
  }
  CHECK_THROWS_WITH(kiln::data::decode_pixels(at::zeros({2, 2}), {0.5, 0.5}), Catch::Contains("expected uint8 pixels"));
}

TEST_CASE("the idx data set keeps uint8 pixels; model_inputs gives the normalised floats", "[data][fashion]") {
  REQUIRE(std::filesystem::exists(kiln::data::kDefaultFashionMnistRoot));  // scripts/setup installs it
  const auto d = kiln::data::load_data(kiln::data::DataOptions().train_limit(300).test_limit(50));
  REQUIRE(d.train.x.scalar_type() == at::kByte);
  REQUIRE(d.train.x.sizes() == at::IntArrayRef({300, 784}));
  REQUIRE(d.test.x.sizes() == at::IntArrayRef({50, 784}));
  const auto raw = kiln::data::load_fashion_mnist(kiln::data::kDefaultFashionMnistRoot, kiln::data::Split::kTrain, 300);
  REQUIRE(at::equal(d.train.x, raw.images.reshape({300, 784})));
  const kiln::data::Normalization norm{d.schema.transform["mean"].get<double>(), d.schema.transform["std"].get<double>()};
  const auto x = kiln::data::model_inputs(d.train.x.narrow(0, 5, 64), d.schema);
  REQUIRE(at::equal(x, kiln::data::normalize_images(raw.images.narrow(0, 5, 64), norm)));
  // The model's inputs are centred and scaled as the schema says.
  const auto all = kiln::data::model_inputs(d.train.x, d.schema).to(at::kDouble);
  CHECK(all.mean().item<double>() == Approx(0.0).margin(1e-6));
  CHECK(all.std().item<double>() == Approx(1.0).epsilon(1e-6));
}
