// IDX files through zlib's C interface: gzread streams both gzip and plain files,
// so one code path checks the header and reads the payload in large chunks.
#include "data/idx.h"
#include "util/files.h"

#include <ATen/ops/empty.h>
#include <c10/util/StringUtil.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <vector>

#include "util/error.h"

namespace kiln::data {
namespace {

constexpr uint8_t kTypeUnsignedByte = 0x08;
constexpr int64_t kMaxElements = int64_t{1} << 34;  // 16 GiB: larger is surely a foreign file
constexpr int64_t kMaxInflation = 1032;  // deflate's largest ratio of inflated to compressed bytes

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw InputError(c10::str(path, ": ", what));
}

// zlib's message for a stream it cannot inflate, without the path it puts first.
[[noreturn]] void fail_zlib(gzFile f, const std::string& path) {
  int code = 0;
  std::string msg = gzerror(f, &code);
  if (msg.starts_with(path + ": ")) msg.erase(0, path.size() + 2);
  fail(path, c10::str("expected an IDX file, plain or gzip-compressed, found a damaged gzip stream (zlib: ",
                      msg, ")"));
}

// Reads up to n bytes; returns how many were read, throws on a zlib error.
int64_t read_some(gzFile f, const std::string& path, void* dst, int64_t n) {
  int64_t done = 0;
  auto* out = static_cast<char*>(dst);
  while (done < n) {
    const auto chunk = static_cast<unsigned>(std::min<int64_t>(n - done, 1 << 24));
    const int got = gzread(f, out + done, chunk);
    if (got < 0) fail_zlib(f, path);
    if (got == 0) {
      int code = 0;
      gzerror(f, &code);
      if (code != Z_OK && code != Z_BUF_ERROR) fail_zlib(f, path);
      break;  // end of data (Z_BUF_ERROR: a gzip stream cut short)
    }
    done += got;
  }
  return done;
}

uint32_t big_endian(const uint8_t* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
}

}  // namespace

at::Tensor read_idx(const std::string& path) {
  if (!std::filesystem::exists(path)) fail(path, "no such file");
  files::require_regular_file(path, "IDX");
  GzFile f(gzopen(path.c_str(), "rb"));
  if (!f) fail(path, c10::str("cannot open: ", std::strerror(errno)));
  // zlib's buffers (input, and twice that for output) sized to the file, up to 1 MiB: a
  // 1 MiB buffer for a 10 KB file costs more to allocate and fault in than to read it.
  std::error_code size_error;
  const auto file_bytes = std::filesystem::file_size(path, size_error);
  gzbuffer(f.get(), static_cast<unsigned>(
                        std::clamp<uintmax_t>(size_error ? 1 << 20 : file_bytes + 1, 1 << 13, 1 << 20)));

  std::array<uint8_t, 4> magic{};
  if (read_some(f.get(), path, magic.data(), 4) != 4)
    fail(path, "truncated: the file ends inside the 4-byte IDX magic number");
  const uint32_t m = big_endian(magic.data());
  if (magic[0] != 0 || magic[1] != 0 || magic[3] < 1 || magic[3] > 4)
    fail(path, c10::str("expected an IDX magic number 0x000008NN with rank NN in 1..4, found 0x",
                        std::hex, m));
  if (magic[2] != kTypeUnsignedByte)
    fail(path, c10::str("expected IDX data type 0x08 (unsigned byte), found 0x", std::hex,
                        static_cast<int>(magic[2])));
  const int rank = magic[3];

  std::vector<int64_t> dims(rank);
  int64_t count = 1;
  for (int d = 0; d < rank; ++d) {
    std::array<uint8_t, 4> b{};
    if (read_some(f.get(), path, b.data(), 4) != 4)
      fail(path, c10::str("truncated: the file ends inside the header (dimension ", d, " of ",
                          rank, ")"));
    dims[d] = big_endian(b.data());
    if (dims[d] == 0) fail(path, c10::str("dimension ", d, " is 0; expected a positive size"));
    if (dims[d] > kMaxElements / count)  // count * dims[d] > kMaxElements, without overflow
      fail(path, c10::str("the header declares more than ", kMaxElements,
                          " elements; this is not a data set kiln can hold"));
    count *= dims[d];
  }

  // The header may declare up to kMaxElements bytes; a damaged file of a few bytes must
  // not allocate that much (the fuzzer's first finding). A plain file's size is known, so
  // it is checked before the tensor is made; a gzip stream's is not (its ISIZE field is
  // the size mod 2^32, and can lie), but it cannot inflate past 1,032 times its size:
  // past that bound (or with no size) its buffer grows with the data that arrives.
  auto out = at::empty({0}, at::TensorOptions().dtype(at::kByte));
  int64_t got = 0;
  if (gzdirect(f.get())) {
    const int64_t header = 4 + 4 * int64_t{rank};
    const auto size = static_cast<int64_t>(std::filesystem::file_size(path));
    got = std::min(count, size - header);
    if (got == count) {
      out = at::empty(dims, at::TensorOptions().dtype(at::kByte));
      got = read_some(f.get(), path, out.data_ptr(), count);
    }
  } else if (!size_error && count / kMaxInflation <= static_cast<int64_t>(file_bytes)) {
    // A gzip stream can hold the declared bytes (deflate inflates 1,032-fold at most):
    // read straight into the tensor. For Fashion-MNIST's 26 MB of training images a
    // growing buffer and its copy wrote 47 MB three times over.
    out = at::empty(dims, at::TensorOptions().dtype(at::kByte));
    got = read_some(f.get(), path, out.data_ptr(), count);
  } else {
    std::vector<uint8_t> buffer;
    while (got < count) {  // grows by doubling from 64 KiB, so a small stream stays small
      buffer.resize(static_cast<size_t>(std::min(count, std::max<int64_t>(2 * got, 1 << 16))));
      const int64_t want = static_cast<int64_t>(buffer.size()) - got;
      const int64_t n = read_some(f.get(), path, buffer.data() + got, want);
      got += n;
      if (n < want) break;
    }
    if (got == count) {
      out = at::empty(dims, at::TensorOptions().dtype(at::kByte));
      std::memcpy(out.data_ptr(), buffer.data(), static_cast<size_t>(count));
    }
  }
  if (got != count)
    fail(path, c10::str("truncated: the header declares ", count, " data bytes (shape ", c10::IntArrayRef(dims),
                        "), the file has ", got));
  uint8_t extra = 0;
  if (read_some(f.get(), path, &extra, 1) != 0)
    fail(path, c10::str("has data past the ", count, " bytes its header declares (shape ", c10::IntArrayRef(dims),
                        "); expected the file to end there"));
  return out;
}

void write_idx(const std::string& path, const at::Tensor& t) {
  TORCH_CHECK(t.scalar_type() == at::kByte, "write_idx: t: expected uint8, got ", t.scalar_type());
  TORCH_CHECK(t.dim() >= 1 && t.dim() <= 4, "write_idx: t: expected rank 1..4, got ", t.dim());
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  GzFile f(gzopen(path.c_str(), gz ? "wb6" : "wbT"));
  TORCH_CHECK(f, "write_idx: cannot open ", path, ": ", std::strerror(errno));
  std::vector<uint8_t> header = {0, 0, kTypeUnsignedByte, static_cast<uint8_t>(t.dim())};
  for (const int64_t d : t.sizes())
    for (int s = 24; s >= 0; s -= 8) header.push_back(static_cast<uint8_t>(d >> s));
  const auto c = t.contiguous();
  const bool ok = gzwrite(f.get(), header.data(), header.size()) == static_cast<int>(header.size()) &&
                  gzwrite(f.get(), c.const_data_ptr(), c.numel()) == c.numel();
  TORCH_CHECK(ok, "write_idx: writing ", path, " failed");
}

}  // namespace kiln::data
