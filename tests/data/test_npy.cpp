// .npy: every dtype round-trips through write_npy and read_npy; the read tensor wraps
// the file's mapping without a copy (and writing to it leaves the file as it was);
// files as NumPy writes them (version 2.0, fortran_order, '|' and '=' byte orders) are
// read; a damaged or unsupported file is refused naming the file and the field.
#include <torch/torch.h>

#include <filesystem>
#include <string>

#include "data/npy.h"
#include "support.h"
#include "util/error.h"
#include "util/files.h"

namespace {

// An .npy file by hand: magic, version, header length, the header padded to 64, data.
std::string npy_bytes(const std::string& dict, const std::string& data, int major = 1) {
  std::string header = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  for (size_t k = 0; k < (major == 1 ? 2u : 4u); ++k)
    out += static_cast<char>((header.size() >> (8 * k)) & 0xff);
  return out + header + data;
}

std::string floats(std::initializer_list<float> v) {
  return std::string(reinterpret_cast<const char*>(v.begin()), v.size() * sizeof(float));
}

std::string error_of(const std::string& path) {
  return kiln::test::input_error_of([&] { kiln::data::read_npy(path); });
}

}  // namespace

TEST_CASE("every NumPy dtype round-trips through write_npy and read_npy", "[data][npy]") {
  kiln::test::TempDir dir;
  for (const auto dtype : {at::kBool, at::kByte, at::kChar, at::kShort, at::kInt, at::kLong,
                           at::kHalf, at::kFloat, at::kDouble}) {
    INFO(dtype);
    const auto t = (at::randn({3, 5, 2}) * 50).to(dtype);
    for (const auto& shape : std::vector<std::vector<int64_t>>{{3, 5, 2}, {30}, {}, {0, 4}}) {
      INFO("shape " << c10::IntArrayRef(shape));
      const auto x = t.flatten().narrow(0, 0, c10::multiply_integers(shape)).reshape(shape);
      const auto path = dir / "x.npy";
      // A non-contiguous view (reversed dimensions, permuted back) is written row-major.
      std::vector<int64_t> reversed(x.dim());
      for (int64_t k = 0; k < x.dim(); ++k) reversed[k] = x.dim() - 1 - k;
      kiln::data::write_npy(path, x.permute(reversed).contiguous().permute(reversed));
      const auto y = kiln::data::read_npy(path);
      REQUIRE(y.scalar_type() == dtype);
      REQUIRE(y.sizes() == x.sizes());
      REQUIRE(torch::equal(y, x));
      REQUIRE(std::filesystem::file_size(path) % 64 ==
              static_cast<uintmax_t>(x.numel() * x.element_size()) % 64);
    }
  }
  REQUIRE_THROWS_WITH(kiln::data::write_npy(dir / "b.npy", at::ones({2}, at::kBFloat16)),
                      Catch::Contains("cannot write BFloat16 as .npy: NumPy has no such dtype"));
}

TEST_CASE("read_npy wraps the file's mapping: no copy, and writes never reach the file",
          "[data][npy]") {
  kiln::test::TempDir dir;
  const auto path = dir / "m.npy";
  kiln::files::write_synced(path, npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }",
                                            floats({1, 2, 3, 4})));
  auto y = kiln::data::read_npy(path);
  // The data starts where the header ends in the page-aligned mapping: a view of the
  // file, not a heap copy.
  const auto offset = std::filesystem::file_size(path) - 16;
  REQUIRE(reinterpret_cast<uintptr_t>(y.const_data_ptr()) % 4096 == offset);
  REQUIRE(torch::equal(y, torch::tensor({{1.f, 2.f}, {3.f, 4.f}})));
  y.mul_(10);
  REQUIRE(y[1][1].item<float>() == 40.f);
  REQUIRE(torch::equal(kiln::data::read_npy(path), torch::tensor({{1.f, 2.f}, {3.f, 4.f}})));
  // A view outlives the tensor it came from: the mapping stays with the storage.
  at::Tensor row;
  { row = kiln::data::read_npy(path)[1]; }
  REQUIRE(torch::equal(row, torch::tensor({3.f, 4.f})));
}

TEST_CASE("read_npy reads version 2.0, fortran_order and every byte-order mark NumPy writes",
          "[data][npy]") {
  kiln::test::TempDir dir;
  const auto path = dir / "f.npy";
  // Column-major (2, 3): memory 1 4 2 5 3 6 holds [[1, 2, 3], [4, 5, 6]].
  kiln::files::write_synced(path, npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
                                            floats({1, 4, 2, 5, 3, 6}), 2));
  const auto f = kiln::data::read_npy(path);
  REQUIRE(torch::equal(f, torch::tensor({{1.f, 2.f, 3.f}, {4.f, 5.f, 6.f}})));
  REQUIRE(f.stride(0) == 1);  // wrapped, not copied
  kiln::files::write_synced(path, npy_bytes("{\"descr\": \"|u1\", \"shape\": (3,), \"fortran_order\": False}",
                                            std::string("\x01\x02\x03", 3)));
  REQUIRE(torch::equal(kiln::data::read_npy(path), torch::tensor({1, 2, 3}, at::kByte)));
  kiln::files::write_synced(path, npy_bytes("{'descr': '=f4', 'fortran_order': False, 'shape': (1,), }",
                                            floats({7})));
  REQUIRE(kiln::data::read_npy(path).item<float>() == 7.f);
}

TEST_CASE("read_npy swaps big-endian numbers and reads strings as code points", "[data][npy]") {
  kiln::test::TempDir dir;
  const auto path = dir / "b.npy";
  // '>f4' 1.5 and −2 (0x3FC00000, 0xC0000000) and '>i8' 258, in Fortran order too.
  kiln::files::write_synced(path, npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }",
                                            std::string("\x3f\xc0\x00\x00\xc0\x00\x00\x00", 8)));
  REQUIRE(torch::equal(kiln::data::read_npy(path), torch::tensor({1.5f, -2.f})));
  std::string longs;
  for (const int64_t v : {1, 2, 258, 4}) {
    for (int b = 7; b >= 0; --b) longs += static_cast<char>((v >> (8 * b)) & 0xff);
  }
  kiln::files::write_synced(path, npy_bytes("{'descr': '>i8', 'fortran_order': True, 'shape': (2, 2), }", longs));
  REQUIRE(torch::equal(kiln::data::read_npy(path), torch::tensor({{int64_t{1}, int64_t{258}}, {int64_t{2}, int64_t{4}}})));
  // Strings: [*shape, chars] uint32 code points, NUL-padded; 'U' little- and big-endian, 'S' bytes;
  // Fortran order comes back row-major.
  const auto codes = [](const at::Tensor& t) { return t.to(at::kLong); };
  kiln::files::write_synced(path, npy_bytes("{'descr': '<U2', 'fortran_order': False, 'shape': (2,), }",
                                            std::string("a\0\0\0\xe9\0\0\0b\0\0\0\0\0\0\0", 16)));
  auto u = kiln::data::read_npy(path);
  REQUIRE(u.scalar_type() == at::kUInt32);
  REQUIRE(torch::equal(codes(u), torch::tensor({{int64_t{'a'}, int64_t{0xe9}}, {int64_t{'b'}, int64_t{0}}})));
  kiln::files::write_synced(path, npy_bytes("{'descr': '>U1', 'fortran_order': False, 'shape': (2,), }",
                                            std::string("\0\x01\xf6\x00\0\0\0c", 8)));
  REQUIRE(torch::equal(codes(kiln::data::read_npy(path)), torch::tensor({{int64_t{0x1f600}}, {int64_t{'c'}}})));
  kiln::files::write_synced(path, npy_bytes("{'descr': '|S2', 'fortran_order': True, 'shape': (2, 2), }",
                                            std::string("abcdefgh", 8)));
  // Column-major: elements (0,0) "ab", (1,0) "cd", (0,1) "ef", (1,1) "gh".
  REQUIRE(torch::equal(codes(kiln::data::read_npy(path)),
                       torch::tensor(std::vector<int64_t>{'a', 'b', 'e', 'f', 'c', 'd', 'g', 'h'}).reshape({2, 2, 2})));
}

TEST_CASE("a damaged or unsupported .npy file is refused naming the file and the field",
          "[data][npy]") {
  kiln::test::TempDir dir;
  const auto path = dir / "bad.npy";
  const auto with = [&](const std::string& bytes) {
    kiln::files::write_synced(path, bytes);
    return error_of(path);
  };
  const std::string ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  REQUIRE_THAT(with("PK\x03\x04 not numpy at all"),
               Catch::Contains(path + ": not an .npy file (expected the magic \\x93NUMPY)"));
  auto v4 = npy_bytes(ok, floats({1, 2}));
  v4[6] = 4;
  REQUIRE_THAT(with(v4), Catch::Contains(path + ": format version 4.0: expected 1.0, 2.0 or 3.0"));
  REQUIRE_THAT(with(npy_bytes(ok, floats({1, 2})).substr(0, 40)),
               Catch::Contains(path + ": truncated header: it declares"));
  REQUIRE_THAT(with(npy_bytes(ok, floats({1}))),
               Catch::Contains(path + ": shape [2] of Float needs 8 data bytes, the file has 4"));
  REQUIRE_THAT(with(npy_bytes(ok, floats({1, 2, 3}))),
               Catch::Contains("needs 8 data bytes, the file has 12"));
  // The header is quoted without NumPy's padding and line end: the message is one line.
  REQUIRE(with(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", floats({1, 2}))) ==
          path + ": header: unknown key 'x' (expected descr, fortran_order, shape) (header "
                 "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1})");
  REQUIRE_THAT(with(npy_bytes("{'descr': '<U0', 'fortran_order': False, 'shape': (2,), }", "")),
               Catch::Contains("descr '<U0': expected a string type 'U<n>' or 'S<n>' with n >= 1"));
  REQUIRE_THAT(with(npy_bytes("{'descr': '<U2', 'fortran_order': False, 'shape': (2,), }", std::string(12, 'a'))),
               Catch::Contains(path + ": shape [2] of <U2 needs 16 data bytes, the file has 12"));
  REQUIRE_THAT(with(npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", floats({1, 2}))),
               Catch::Contains("descr '<c8': expected one of b1, u1, i1, i2, i4, i8, f2, f4, f8"));
  REQUIRE_THAT(with(npy_bytes("{'descr': '<f4', 'shape': (2,), }", floats({1, 2}))),
               Catch::Contains(path + ": header: missing 'fortran_order'"));
  REQUIRE_THAT(with(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1), }", floats({1, 2}))),
               Catch::Contains("shape: expected a non-negative integer"));
  REQUIRE_THAT(with(npy_bytes("{'descr': '<f4', 'fortran_order': maybe, 'shape': (2,), }", floats({1, 2}))),
               Catch::Contains("fortran_order: expected True or False"));
  REQUIRE_THAT(with(""), Catch::Contains("not an .npy file"));
  REQUIRE_THAT(error_of(dir / "missing.npy"), Catch::Contains("missing.npy: cannot open"));
  REQUIRE_THAT(error_of(dir.path()), Catch::Contains("expected a regular .npy file"));
}
