// kiln::safetensors: every dtype round-trips, the bytes equal a file built by
// hand from the format's specification, and every kind of malformed file is
// refused with a message naming the file, the tensor or field and the mismatch.
#include <torch/torch.h>

#include <filesystem>

#include "support.h"
#include "util/error.h"
#include "util/files.h"
#include "util/safetensors.h"

namespace st = kiln::safetensors;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;

namespace {

// A safetensors file from its parts: the 8-byte little-endian length, the header text, the data.
std::string file_of(const std::string& header, const std::string& data) {
  const uint64_t n = header.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
}

// The parse error of `bytes`, as a user sees it.
std::string error_of(const std::string& bytes) {
  return kiln::test::input_error_of([&] { st::deserialize(bytes, "bad.safetensors"); });
}

const std::string kF32x6(24, '\0');  // data of an F32 [2, 3]

}  // namespace

TEST_CASE("every safetensors dtype round-trips bit for bit", "[util][safetensors]") {
  torch::manual_seed(0);
  const std::vector<at::ScalarType> dtypes = {at::kDouble, at::kFloat, at::kHalf, at::kBFloat16,
                                              at::kLong,   at::kInt,   at::kShort, at::kChar,
                                              at::kByte,   at::kBool};
  st::NamedTensors tensors;
  for (const auto dtype : dtypes) {
    const auto name = std::string("t.") + c10::toString(dtype);
    const auto t = at::isFloatingType(dtype) ? torch::randn({3, 5}).to(dtype)
                                             : torch::randint(0, dtype == at::kBool ? 2 : 100,
                                                              {3, 5}).to(dtype);
    tensors.emplace_back(name, t);
  }
  tensors.emplace_back("scalar", torch::tensor(2.5, torch::kDouble).reshape({}));
  tensors.emplace_back("empty", torch::zeros({0, 4}));
  const auto back = st::deserialize(st::serialize(tensors), "mem");
  REQUIRE(back.tensors.size() == tensors.size());
  // File order is the reference library's: dtype alignment descending, then name.
  std::vector<std::string> order;
  for (const auto& [name, t] : back.tensors) order.push_back(name);
  REQUIRE(order == std::vector<std::string>{"t.Long", "scalar", "t.Double", "empty", "t.Float",
                                            "t.Int", "t.BFloat16", "t.Half", "t.Short", "t.Char",
                                            "t.Byte", "t.Bool"});
  for (const auto& [name, t] : tensors) {
    INFO(name);
    const auto it = std::find_if(back.tensors.begin(), back.tensors.end(),
                                 [&](const auto& p) { return p.first == name; });
    REQUIRE(it != back.tensors.end());
    REQUIRE(it->second.scalar_type() == t.scalar_type());
    REQUIRE(it->second.sizes() == t.sizes());
    REQUIRE(torch::equal(it->second, t));
  }
}

TEST_CASE("kiln's bytes equal a safetensors file built by hand from the specification",
          "[util][safetensors]") {
  // The format's own example: one F32 tensor, a 64-byte header (no padding needed).
  const std::string one = file_of(
      R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})",
      std::string("\x00\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x40"
                  "\x00\x00\x40\x40\x00\x00\x80\x40\x00\x00\xa0\x40", 24));
  REQUIRE(st::serialize({{"attn.0", torch::arange(6, torch::kFloat).reshape({1, 2, 3})}}) == one);

  // Metadata first, then the tensors by dtype alignment (I64, F32, U8) and name;
  // the 197-byte header is padded with 3 spaces so the data starts 8-byte aligned.
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
      R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[16,32]},)"
      R"("a":{"dtype":"U8","shape":[3],"data_offsets":[32,35]}}   )";
  REQUIRE(header.size() == 200);
  const std::string data("\x01\x00\x00\x00\x00\x00\x00\x00\xfe\xff\xff\xff\xff\xff\xff\xff"
                         "\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x00\xbf\x00\x00\x80\x3e"
                         "\x01\x02\xff", 35);
  const std::string golden = std::string("\xc8\0\0\0\0\0\0\0", 8) + header + data;
  const auto a = torch::tensor({1, 2, 255}, torch::kUInt8);
  const auto b = torch::tensor({1, -2}, torch::kLong);
  // w is given transposed (non-contiguous) and must be written row-major.
  const auto w = torch::tensor({1.0f, -0.5f, 2.0f, 0.25f}).reshape({2, 2}).t();
  REQUIRE_FALSE(w.is_contiguous());
  REQUIRE(st::serialize({{"a", a}, {"w", w}, {"b", b}}, {{"format", "pt"}}) == golden);

  const auto back = st::deserialize(golden, "golden");
  REQUIRE(back.metadata == st::Metadata{{"format", "pt"}});
  REQUIRE(back.tensors.size() == 3);
  REQUIRE(back.tensors[0].first == "b");
  REQUIRE(torch::equal(back.tensors[0].second, b));
  REQUIRE(torch::equal(back.tensors[1].second, w));
  REQUIRE(torch::equal(back.tensors[2].second, a));
}

TEST_CASE("safetensors metadata round-trips through a file", "[util][safetensors]") {
  kiln::test::TempDir dir;
  const st::Metadata meta{{"format", "pt"}, {"step", "42"}, {"note", "quotes \" and \\ and ü"}};
  st::save_file(dir / "m.safetensors", {{"x", torch::ones({2})}}, meta);
  const auto back = st::load_file(dir / "m.safetensors");
  REQUIRE(back.metadata == meta);
  REQUIRE(torch::equal(back.tensors.at(0).second, torch::ones({2})));
  // No metadata, no "__metadata__" key.
  REQUIRE(st::serialize({{"x", torch::ones({2})}}).find("__metadata__") == std::string::npos);
}

TEST_CASE("a CUDA tensor is written from a CPU copy", "[util][safetensors][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  const auto x = torch::randn({4, 3}, torch::kCUDA).t();
  const auto back = st::deserialize(st::serialize({{"x", x}}), "mem");
  REQUIRE(back.tensors.at(0).second.device().is_cpu());
  REQUIRE(torch::equal(back.tensors.at(0).second, x.cpu()));
}

TEST_CASE("a malformed safetensors file names the file, the field and the mismatch",
          "[util][safetensors]") {
  const auto entry = [](const std::string& name, const std::string& dtype,
                        const std::string& shape, const std::string& offsets) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
           ",\"data_offsets\":" + offsets + "}";
  };
  const std::string good = std::string("{") + entry("w", "F32", "[2,3]", "[0,24]") + "}";
  REQUIRE_NOTHROW(st::deserialize(file_of(good, kF32x6), "good"));

  REQUIRE_THAT(error_of(std::string("\x05\0\0\0\0", 5)),
               Equals("bad.safetensors: expected at least 8 bytes (the header length), found 5 "
                      "(not a safetensors file, or truncated)"));
  REQUIRE_THAT(error_of(file_of(good, kF32x6).substr(0, 40)),
               Equals("bad.safetensors: truncated: the header length says 57 bytes, but only 32 "
                      "bytes follow it"));
  REQUIRE_THAT(error_of(std::string("\xff\xff\xff\xff\0\0\0\0{}", 10)),
               Contains("header length: expected at most 100000000 bytes, found 4294967295"));
  REQUIRE_THAT(error_of(file_of("{\"w\": oops}", "")),
               Contains("bad.safetensors: header: expected JSON, found text that does not parse"));
  // A number JSON cannot hold (the fuzzer's find: nlohmann's out_of_range escaped, exit 1).
  REQUIRE_THAT(error_of(file_of("{\"w\": 4e444559}", "")),
               Contains("bad.safetensors: header: expected JSON, found text that does not parse "
                        "([json.exception.out_of_range.406] number overflow parsing '4e444559')"));
  REQUIRE_THAT(error_of(file_of("[1, 2]", "")),
               Equals("bad.safetensors: header: expected a JSON object, found array"));
  REQUIRE_THAT(error_of(file_of(std::string("{") + entry("w", "F8_E4M3", "[2,3]", "[0,6]") + "}", "123456")),
               Equals("bad.safetensors: tensor 'w': dtype: expected one of F64 F32 F16 BF16 I64 "
                      "I32 I16 I8 U8 BOOL, found \"F8_E4M3\""));
  REQUIRE_THAT(error_of(file_of(std::string("{") + entry("w", "F32", "[2,3]", "[0,20]") + "}", kF32x6)),
               Equals("bad.safetensors: tensor 'w': F32 [2, 3] needs 24 bytes, but its "
                      "data_offsets [0, 20] span 20"));
  REQUIRE_THAT(error_of(file_of(std::string("{") + entry("w", "F32", "[2,-3]", "[0,24]") + "}", kF32x6)),
               Contains("tensor 'w': shape: expected an array of non-negative integers, found "
                        "[2,-3]"));
  REQUIRE_THAT(error_of(file_of(std::string("{") + entry("w", "F32", "[2,3]", "[24,0]") + "}", kF32x6)),
               Contains("tensor 'w': data_offsets: expected [begin, end] with 0 <= begin <= end, "
                        "found array [24,0]"));
  REQUIRE_THAT(error_of(file_of("{\"w\":[1]}", "")),
               Contains("tensor 'w': expected an object with dtype, shape and data_offsets, "
                        "found array [1]"));
  // Offsets past the data: the file was cut short.
  REQUIRE_THAT(error_of(file_of(good, kF32x6.substr(0, 16))),
               Equals("bad.safetensors: tensor 'w': data_offsets [0, 24] reach past the end of "
                      "the 16-byte data buffer (truncated?)"));
  REQUIRE_THAT(error_of(file_of(std::string("{") + entry("a", "F32", "[4]", "[0,16]") + "," +
                                    entry("b", "F32", "[4]", "[8,24]") + "}",
                                kF32x6)),
               Equals("bad.safetensors: tensors 'a' and 'b' overlap: data_offsets [0, 16] and "
                      "[8, 24]"));
  REQUIRE_THAT(error_of(file_of(std::string("{") + entry("a", "F32", "[2]", "[0,8]") + "," +
                                    entry("b", "F32", "[2]", "[16,24]") + "}",
                                kF32x6)),
               Contains("bad.safetensors: data bytes [8, 16) belong to no tensor"));
  REQUIRE_THAT(error_of(file_of(good, kF32x6 + "xx")),
               Equals("bad.safetensors: data bytes [24, 26) belong to no tensor (expected the "
                      "26-byte data buffer to end where the last tensor ends)"));
  REQUIRE_THAT(error_of(file_of(std::string("{") + entry("w", "F32", "[2,3]", "[0,24]") + "," +
                                    entry("w", "F32", "[2,3]", "[0,24]") + "}",
                                kF32x6)),
               Equals("bad.safetensors: header: expected each tensor name once, found 'w' more "
                      "than once"));
  REQUIRE_THAT(error_of(file_of("{\"__metadata__\":{\"step\":3}}", "")),
               Equals("bad.safetensors: __metadata__ 'step': expected a string, found number 3"));
}

TEST_CASE("a safetensors file on disk is named in its errors", "[util][safetensors]") {
  kiln::test::TempDir dir;
  const auto path = dir / "cut.safetensors";
  st::save_file(path, {{"w", torch::ones({2, 3})}});
  const auto bytes = kiln::files::read(path);
  kiln::files::write_synced(path, bytes.substr(0, bytes.size() - 1));
  REQUIRE_THROWS_WITH(st::load_file(path), Contains(path + ": tensor 'w': data_offsets [0, 24]"));
  REQUIRE_THROWS_WITH(st::load_file(dir / "none.safetensors"),
                      Contains(dir / "none.safetensors" + ": cannot read the file"));
}

TEST_CASE("writing an unsupported dtype or a repeated name is a caller error",
          "[util][safetensors]") {
  REQUIRE_THROWS_WITH(st::serialize({{"c", torch::ones({2}, torch::kComplexFloat)}}),
                      Contains("'c': expected a dtype of F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL"));
  REQUIRE_THROWS_WITH(st::serialize({{"x", torch::ones({1})}, {"x", torch::ones({1})}}),
                      Contains("expected unique names, got 'x' twice"));
}

TEST_CASE("zlib's CRC-32 has the standard check value", "[util][safetensors]") {
  REQUIRE(kiln::files::crc32("123456789") == 0xCBF43926u);
}
