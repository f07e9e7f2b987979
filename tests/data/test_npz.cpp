// .npz: write_npz and read_npz round-trip every dtype, with stored entries wrapped in
// the archive's mapping; archives built here byte by byte (stored and deflated entries,
// ZIP64 records, data descriptors) are read, and damaged ones refused naming the file,
// the entry and the byte; NumPy's own savez/savez_compressed files are read and NumPy
// reads kiln's (with the torch venv's Python, skipped without it).
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "data/npy.h"
#include "data/npz.h"
#include "support.h"
#include "util/error.h"
#include "util/files.h"

namespace {

void put(std::string& out, uint64_t v, int bytes) {
  for (int k = 0; k < bytes; ++k) out += static_cast<char>((v >> (8 * k)) & 0xff);
}

// A raw deflate stream of stored blocks (RFC 1951, 3.2.4): valid input for inflate,
// made without zlib.
std::string deflate_stored(const std::string& data) {
  std::string out;
  size_t at = 0;
  do {
    const size_t len = std::min<size_t>(65535, data.size() - at);
    out += static_cast<char>(at + len == data.size() ? 1 : 0);  // BFINAL, BTYPE = 00
    put(out, len, 2);
    put(out, ~len & 0xffff, 2);
    out += data.substr(at, len);
    at += len;
  } while (at < data.size());
  return out;
}

struct ZipEntry {
  std::string name;
  std::string data;  // uncompressed
  uint16_t method = 0;  // 0 stored, 8 deflate (stored blocks), other: stored bytes
  uint16_t flags = 0;
  std::optional<uint32_t> crc = std::nullopt;  // the CRC to write, when not the data's
  std::optional<std::string> body = std::nullopt;  // the compressed bytes, when not made here
  size_t pad = 0;  // extra bytes in the local header's extra field
};

// A ZIP archive by hand (APPNOTE 6.3): local headers, central directory, end record; with
// zip64, ZIP64 extra fields in every header and the ZIP64 end record and locator.
std::string zip(const std::vector<ZipEntry>& entries, bool zip64 = false) {
  std::string out, dir;
  for (const auto& e : entries) {
    const std::string body = e.body ? *e.body : e.method == 8 ? deflate_stored(e.data) : e.data;
    const uint32_t crc = e.crc ? *e.crc : kiln::files::crc32(e.data);
    const uint64_t local = out.size();
    const uint32_t csize = zip64 ? 0xffffffff : body.size(),
                   usize = zip64 ? 0xffffffff : e.data.size();
    const bool descriptor = e.flags & 8;
    put(out, 0x04034b50, 4), put(out, 45, 2), put(out, e.flags, 2), put(out, e.method, 2);
    put(out, 0, 4), put(out, descriptor ? 0 : crc, 4), put(out, descriptor ? 0 : csize, 4);
    put(out, descriptor ? 0 : usize, 4), put(out, e.name.size(), 2);
    put(out, (zip64 ? 20 : 0) + (e.pad ? e.pad + 4 : 0), 2);
    out += e.name;
    if (zip64)
      put(out, 1, 2), put(out, 16, 2), put(out, e.data.size(), 8), put(out, body.size(), 8);
    if (e.pad) put(out, 0xcafe, 2), put(out, e.pad, 2), out.append(e.pad, 'p');
    out += body;
    if (descriptor)
      put(out, 0x08074b50, 4), put(out, crc, 4), put(out, body.size(), 4),
          put(out, e.data.size(), 4);

    put(dir, 0x02014b50, 4), put(dir, 45, 2), put(dir, 45, 2), put(dir, e.flags, 2);
    put(dir, e.method, 2), put(dir, 0, 4), put(dir, crc, 4), put(dir, csize, 4), put(dir, usize, 4);
    put(dir, e.name.size(), 2), put(dir, zip64 ? 28 : 0, 2), put(dir, 0, 2), put(dir, 0, 2);
    put(dir, 0, 2), put(dir, 0, 4), put(dir, zip64 ? 0xffffffff : local, 4);
    dir += e.name;
    if (zip64)
      put(dir, 1, 2), put(dir, 24, 2), put(dir, e.data.size(), 8), put(dir, body.size(), 8),
          put(dir, local, 8);
  }
  const uint64_t dir_at = out.size();
  out += dir;
  if (zip64) {
    const uint64_t end64 = out.size();
    put(out, 0x06064b50, 4), put(out, 44, 8), put(out, 45, 2), put(out, 45, 2), put(out, 0, 8);
    put(out, entries.size(), 8), put(out, entries.size(), 8), put(out, dir.size(), 8),
        put(out, dir_at, 8);
    put(out, 0x07064b50, 4), put(out, 0, 4), put(out, end64, 8), put(out, 1, 4);
  }
  put(out, 0x06054b50, 4), put(out, 0, 4);
  put(out, zip64 ? 0xffff : entries.size(), 2), put(out, zip64 ? 0xffff : entries.size(), 2);
  put(out, zip64 ? 0xffffffff : dir.size(), 4), put(out, zip64 ? 0xffffffff : dir_at, 4),
      put(out, 0, 2);
  return out;
}

// The .npy bytes write_npy writes for t.
std::string npy_of(const at::Tensor& t) {
  kiln::test::TempDir dir;
  kiln::data::write_npy(dir / "t.npy", t);
  return kiln::files::read(dir / "t.npy");
}

std::string error_of(const std::string& path) {
  return kiln::test::input_error_of([&] { kiln::data::read_npz(path); });
}

// Deterministic values any dtype holds exactly, the same formula as the Python script's.
at::Tensor values(at::ScalarType dtype, std::vector<int64_t> shape) {
  const auto a = at::arange(c10::multiply_integers(shape), at::kLong).reshape(shape);
  if (dtype == at::kBool) return a.remainder(3) == 0;
  const auto v = (a * 7).remainder(100) - 50;
  return at::isFloatingType(dtype) ? (v.to(at::kDouble) / 4).to(dtype) : v.to(dtype);
}

const std::vector<std::pair<std::string, at::ScalarType>> kDtypes = {
    {"bool", at::kBool}, {"uint8", at::kByte}, {"int8", at::kChar}, {"int16", at::kShort},
    {"int32", at::kInt}, {"int64", at::kLong}, {"float16", at::kHalf}, {"float32", at::kFloat},
    {"float64", at::kDouble}};

}  // namespace

TEST_CASE("write_npz and read_npz round-trip every dtype; stored entries are views of the file",
          "[data][npz]") {
  kiln::test::TempDir dir;
  kiln::data::NamedArrays arrays;
  for (const auto& [name, dtype] : kDtypes) arrays.emplace_back(name, values(dtype, {2, 3, 4}));
  arrays.emplace_back("transposed", values(at::kFloat, {3, 5}).t());
  arrays.emplace_back("scalar", at::scalar_tensor(2.5, at::kDouble));
  arrays.emplace_back("empty", at::empty({0, 3}, at::kShort));
  arrays.emplace_back("naïve", values(at::kInt, {3}));  // a UTF-8 name
  const auto path = dir / "a.npz";
  kiln::data::write_npz(path, arrays);
  auto back = kiln::data::read_npz(path);
  REQUIRE(back.size() == arrays.size());
  for (size_t k = 0; k < arrays.size(); ++k) {
    INFO(arrays[k].first);
    REQUIRE(back[k].first == arrays[k].first);
    REQUIRE(back[k].second.scalar_type() == arrays[k].second.scalar_type());
    REQUIRE(back[k].second.sizes() == arrays[k].second.sizes());
    REQUIRE(torch::equal(back[k].second, arrays[k].second));
  }
  // Each array's data lies 64-aligned in the file, and the tensors point into one
  // mapping of it: their addresses differ as their file offsets do.
  const std::string bytes = kiln::files::read(path);
  std::vector<size_t> data_at;
  for (size_t at = bytes.find("\x93NUMPY"); at != std::string::npos;
       at = bytes.find("\x93NUMPY", at + 1))
    data_at.push_back(at + 10 + static_cast<unsigned char>(bytes[at + 8]) +
                      256 * static_cast<unsigned char>(bytes[at + 9]));
  REQUIRE(data_at.size() == arrays.size());
  const auto base = reinterpret_cast<uintptr_t>(back[0].second.const_data_ptr()) - data_at[0];
  REQUIRE(base % 4096 == 0);
  for (size_t k = 0; k < arrays.size(); ++k) {
    INFO(arrays[k].first);
    REQUIRE(data_at[k] % 64 == 0);
    if (arrays[k].second.numel() > 0)
      REQUIRE(reinterpret_cast<uintptr_t>(back[k].second.const_data_ptr()) == base + data_at[k]);
  }
  // Copy-on-write: writing to a tensor leaves the file as it was; a view outlives the rest.
  back[7].second.mul_(3);
  REQUIRE(kiln::files::read(path) == bytes);
  const auto row = back[7].second[1];
  back.clear();
  REQUIRE(torch::equal(row, values(at::kFloat, {2, 3, 4})[1] * 3));

  kiln::data::write_npz(dir / "none.npz", {});
  REQUIRE(kiln::data::read_npz(dir / "none.npz").empty());
  REQUIRE_THROWS_WITH(
      kiln::data::write_npz(dir / "d.npz", {{"x", at::ones({1})}, {"x", at::ones({1})}}),
      Catch::Contains("two arrays named 'x'"));
  REQUIRE_THROWS_WITH(kiln::data::write_npz(dir / "b.npz", {{"b", at::ones({1}, at::kBFloat16)}}),
                      Catch::Contains("cannot write BFloat16 as .npy"));
}

TEST_CASE("read_npz reads stored and deflated entries, ZIP64 records and data descriptors",
          "[data][npz]") {
  kiln::test::TempDir dir;
  const auto path = dir / "h.npz";
  const auto x = values(at::kDouble, {4, 3});
  const auto y = values(at::kLong, {5});
  const auto f = values(at::kFloat, {2, 3}).t().contiguous().t();  // column-major (2, 3)
  for (const bool zip64 : {false, true}) {
    INFO("zip64 " << zip64);
    kiln::files::write_synced(
        path, zip({{.name = "x.npy", .data = npy_of(x)},
                   {.name = "y.npy", .data = npy_of(y), .method = 8},
                   {.name = "y2", .data = npy_of(y), .method = 8, .flags = 8},  // a data descriptor
                   {.name = "s.npy", .data = npy_of(at::scalar_tensor(7, at::kHalf)), .method = 8}},
                  zip64));
    const auto a = kiln::data::read_npz(path);
    REQUIRE(a.size() == 4);
    REQUIRE(a[0].first == "x");
    REQUIRE(a[2].first == "y2");  // a name without ".npy" is kept as it is
    REQUIRE(torch::equal(a[0].second, x));
    REQUIRE(torch::equal(a[1].second, y));
    REQUIRE(torch::equal(a[2].second, y));
    REQUIRE(a[3].second.dim() == 0);
    REQUIRE(a[3].second.item<float>() == 7.f);
    // Inflated entries live in 64-aligned buffers of their own.
    REQUIRE(reinterpret_cast<uintptr_t>(a[1].second.const_data_ptr()) % 64 == 0);
  }
  // Fortran order, from a hand-written header, deflated.
  std::string fortran = npy_of(f.t().contiguous());  // memory column-major: f.t() row-major
  const std::string row_major = "'fortran_order': False, 'shape': (3, 2)";
  const auto shape_at = fortran.find(row_major);
  REQUIRE(shape_at != std::string::npos);
  fortran.replace(shape_at, row_major.size(), "'fortran_order': True , 'shape': (2, 3)");
  kiln::files::write_synced(path, zip({{.name = "f.npy", .data = fortran, .method = 8}}));
  const auto fa = kiln::data::read_npz(path);
  REQUIRE(torch::equal(fa[0].second, f));
  REQUIRE(fa[0].second.stride(0) == 1);
  // A stored entry whose data is not aligned to its element size is copied: a pointer
  // into the mapping at an odd file offset cannot be a multiple of 8.
  for (size_t pad = 0; pad < 8; ++pad) {
    kiln::files::write_synced(path, zip({{.name = "x.npy", .data = npy_of(x), .pad = pad}}));
    const auto xa = kiln::data::read_npz(path);
    REQUIRE(torch::equal(xa[0].second, x));
    REQUIRE(reinterpret_cast<uintptr_t>(xa[0].second.const_data_ptr()) % 8 == 0);
  }
}

TEST_CASE("a damaged or unsupported .npz is refused naming the file, the entry and the byte",
          "[data][npz]") {
  kiln::test::TempDir dir;
  const auto path = dir / "bad.npz";
  const auto with = [&](const std::string& bytes) {
    kiln::files::write_synced(path, bytes);
    return error_of(path);
  };
  const std::string x = npy_of(values(at::kFloat, {2}));
  const std::string good = zip({{.name = "x.npy", .data = x}});
  const size_t dir_at = good.find("PK\x01\x02");

  REQUIRE_THAT(with(""),
               Catch::Contains(path + ": byte 0 (end of central directory record): not found"));
  REQUIRE_THAT(with(x), Catch::Contains("found an .npy file (read it with read_npy)"));
  REQUIRE_THAT(with(good.substr(0, good.size() - 5)),
               Catch::Contains("expected a ZIP archive (.npz), found one that is truncated"));
  REQUIRE_THAT(
      with(good.substr(0, dir_at + 10) + good.substr(good.size() - 22)),
      Catch::Contains("central directory at byte " + std::to_string(dir_at) +
                      " of 51 bytes: expected it to end at byte " + std::to_string(dir_at + 10)));
  auto bad = good;
  bad[dir_at + 1] = 'X';
  REQUIRE_THAT(
      with(bad),
      Catch::Contains(c10::str(
          path, ": byte ", dir_at,
          " (central directory entry 0): signature: expected 0x02014b50, found 0x02015850")));
  bad = good;
  bad[1] = 'Q';
  REQUIRE_THAT(
      with(bad),
      Catch::Contains(": byte 0 (local header of 'x.npy'): signature: expected 0x04034b50"));
  REQUIRE_THAT(
      with(zip({{.name = "x.npy", .data = x, .method = 14}})),
      Catch::Contains(c10::str(": byte ", x.size() + 35 + 10,
                               " (central directory entry 0 'x.npy'): compression "
                               "method: expected 0 (stored) or 8 (deflate), found 14 (LZMA)")));
  REQUIRE_THAT(with(zip({{.name = "x.npy", .data = x, .flags = 1}})),
               Catch::Contains(
                   "(central directory entry 0 'x.npy'): encrypted (flags 0x00000001, method 0): "
                   "encrypted entries are not supported"));
  REQUIRE_THAT(
      with(zip({{.name = "x.npy", .data = x, .crc = 0x1234}})),
      Catch::Contains(path +
                      ": byte 35 (entry 'x.npy'): CRC-32: the central directory says 0x00001234, "
                      "the data has 0x"));
  REQUIRE_THAT(
      with(zip({{.name = "x.npy", .data = x, .method = 8, .crc = 0x1234}})),
      Catch::Contains(": byte 35 (entry 'x.npy'): CRC-32: the central directory says 0x00001234, "
                      "the inflated data has 0x"));
  REQUIRE_THAT(
      with(zip({{.name = "x.npy", .data = x, .method = 8, .body = std::string("\x07\x00", 2)}})),
      Catch::Contains("(entry 'x.npy'): deflate data: invalid block type"));
  REQUIRE_THAT(
      with(zip(
          {{.name = "x.npy", .data = x, .method = 8, .body = deflate_stored(x).substr(0, 40)}})),
      Catch::Contains(
          "(entry 'x.npy'): deflate data: the stream ends early: 40 of 40 bytes inflate to 35 of " +
          std::to_string(x.size())));
  REQUIRE_THAT(with(zip({{.name = "x.npy", .data = "hello, not an array"}})),
               Catch::Contains(path + ": entry 'x.npy' at byte 35: not an .npy file"));
  REQUIRE_THAT(
      with(zip({{.name = "x.npy", .data = x.substr(0, x.size() - 4)}})),
      Catch::Contains(path + ": entry 'x.npy' at byte 35: shape [2] of Float needs 8 data bytes, "
                             "the entry has 4"));
  REQUIRE_THAT(
      with(zip({{.name = "x.npy", .data = x}, {.name = "x", .data = x}})),
      Catch::Contains(
          "(central directory entry 1 'x'): duplicate name: entry 0 'x.npy' is also array 'x'"));
  bad = good;
  bad[34] = 'z';  // the local header's name: "x.npz"
  REQUIRE_THAT(with(bad), Catch::Contains(
                              "byte 30 (local header of 'x.npy'): name: the central directory says "
                              "'x.npy', found 'x.npz'"));
  bad = good;
  bad[14] ^= 1;  // the local header's CRC
  REQUIRE_THAT(
      with(bad),
      Catch::Contains("byte 14 (local header of 'x.npy'): CRC-32: the central directory says"));
  // ZIP64: the end record's count disagrees with the ZIP64 record's; a 0xffffffff size
  // with no ZIP64 extra field to hold it.
  const std::string good64 = zip({{.name = "x.npy", .data = x}}, true);
  bad = good64;
  bad[bad.size() - 22 + 10] = 2, bad[bad.size() - 22 + 11] = 0, bad[bad.size() - 22 + 8] = 2,
                        bad[bad.size() - 22 + 9] = 0;
  REQUIRE_THAT(
      with(bad),
      Catch::Contains(
          "(end of central directory record): entry count: 2 here, 1 in the ZIP64 record"));
  bad = good64;
  const size_t dir64 = bad.find("PK\x01\x02");
  bad[dir64 + 46 + 5] = 9;  // the central record's extra field: ID 0x0009, not ZIP64
  REQUIRE_THAT(with(bad),
               Catch::Contains(c10::str(
                   "byte ", dir64 + 51,
                   " (central directory entry 0 'x.npy'): "
                   "expected a ZIP64 extra field (3 fields hold 0xffffffff), found none")));
  bad = good64;
  bad.erase(bad.size() - 42, 20);  // drop the locator
  REQUIRE_THAT(
      with(bad),
      Catch::Contains("fields hold 0xffff/0xffffffff: expected a ZIP64 end of central directory "
                      "locator before this record, found none"));
  REQUIRE_THAT(error_of(dir / "missing.npz"), Catch::Contains("missing.npz: cannot open"));
}

TEST_CASE("any one damaged byte gives the arrays back or an InputError, never a crash",
          "[data][npz]") {
  kiln::test::TempDir dir;
  const auto x = values(at::kFloat, {3, 2});
  for (const bool zip64 : {false, true}) {
    const std::string good = zip({{.name = "x.npy", .data = npy_of(x)},
                                  {.name = "y.npy", .data = npy_of(x), .method = 8}},
                                 zip64);
    size_t refused = 0;
    for (size_t at = 0; at < good.size(); ++at)
      for (const unsigned char value : {0x00, 0xff, 0x80}) {
        if (static_cast<unsigned char>(good[at]) == value) continue;
        auto bad = good;
        bad[at] = static_cast<char>(value);
        // A fresh name each time: rewriting one file would wait on its writeback.
        const auto path = dir / c10::str("f", zip64, "_", at, "_", int{value}, ".npz");
        std::ofstream(path, std::ios::binary) << bad;
        try {
          for (const auto& [name, t] : kiln::data::read_npz(path)) REQUIRE(t.numel() >= 0);
        } catch (const kiln::InputError& e) {
          ++refused;
          REQUIRE_THAT(e.what(), Catch::StartsWith(path + ": "));
        }
      }
    INFO("zip64 " << zip64);
    REQUIRE(refused > good.size());  // most bytes matter
  }
}

TEST_CASE("NumPy's savez and savez_compressed files are read, and NumPy reads write_npz's",
          "[data][npz][interop]") {
  const auto py = kiln::test::python_or_skip("numpy");
  if (!py) return;
  kiln::test::TempDir dir;
  kiln::data::NamedArrays kiln_arrays;
  for (const auto& [name, dtype] : kDtypes)
    kiln_arrays.emplace_back(name, values(dtype, {2, 3, 4}));
  kiln::data::write_npz(dir / "kiln.npz", kiln_arrays);
  std::ofstream(dir / "npz.py") << R"(import os, sys, zipfile
import numpy as np
d = sys.argv[1]
def values(dtype, shape):
    a = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    if dtype == "bool":
        return a % 3 == 0
    v = (a * 7) % 100 - 50
    return (v / 4).astype(dtype) if dtype.startswith("float") else v.astype(dtype)
dtypes = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]
arrays = {t: values(t, (2, 3, 4)) for t in dtypes}
arrays["fortran"] = np.asfortranarray(values("float64", (4, 6)))
arrays["scalar"] = np.array(2.5, dtype=np.float32)
arrays["empty"] = np.zeros((0, 3), dtype=np.int16)
np.savez(os.path.join(d, "stored.npz"), **arrays)
np.savez_compressed(os.path.join(d, "compressed.npz"), **arrays)
# Python writes the ZIP64 central directory and end records only past 2 GiB; lower the
# limits to have them in a small file.
zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT = 16, 2
np.savez(os.path.join(d, "zip64.npz"), **arrays)
np.savez_compressed(os.path.join(d, "zip64_compressed.npz"), **arrays)
with np.load(os.path.join(d, "kiln.npz")) as k:
    assert list(k.keys()) == dtypes, list(k.keys())
    for t in dtypes:
        assert k[t].dtype == np.dtype(t) and np.array_equal(k[t], values(t, (2, 3, 4))), t
)";
  const std::string cmd = *py + " " + (dir / "npz.py") + " " + dir.path();
  REQUIRE(std::system(cmd.c_str()) == 0);
  for (const auto* file : {"stored.npz", "compressed.npz", "zip64.npz", "zip64_compressed.npz"}) {
    INFO(file);
    const std::string bytes = kiln::files::read(dir / file);
    if (std::string(file).starts_with("zip64"))
      REQUIRE(bytes.find("PK\x06\x06") != std::string::npos);
    const auto a = kiln::data::read_npz(dir / file);
    REQUIRE(a.size() == kDtypes.size() + 3);
    for (size_t k = 0; k < kDtypes.size(); ++k) {
      INFO(kDtypes[k].first);
      REQUIRE(a[k].first == kDtypes[k].first);
      REQUIRE(a[k].second.scalar_type() == kDtypes[k].second);
      REQUIRE(torch::equal(a[k].second, values(kDtypes[k].second, {2, 3, 4})));
    }
    REQUIRE(a[9].first == "fortran");
    REQUIRE(torch::equal(a[9].second, values(at::kDouble, {4, 6})));
    REQUIRE(a[9].second.stride(0) == 1);
    REQUIRE(a[10].second.dim() == 0);
    REQUIRE(a[10].second.item<float>() == 2.5f);
    REQUIRE(a[11].second.sizes() == c10::IntArrayRef{0, 3});
    REQUIRE(a[11].second.scalar_type() == at::kShort);
  }
}
