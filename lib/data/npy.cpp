// read_npy / write_npy: the .npy header (magic, version, a Python dict literal with
// descr, fortran_order and shape) parsed strictly, the data mapped with mmap. The parser,
// the wrapping and the mapping serve read_npz too (npy_header.h).
#include "data/npy.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/StringUtil.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "data/npy_header.h"
#include "util/error.h"
#include "util/files.h"

namespace kiln::data {
namespace npy {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";

// NumPy's type string (without the byte-order character) of each dtype kiln reads.
struct NpyType {
  const char* code;
  at::ScalarType dtype;
};
constexpr NpyType kTypes[] = {
    {"b1", at::kBool},  {"u1", at::kByte},  {"i1", at::kChar},  {"i2", at::kShort},
    {"i4", at::kInt},   {"i8", at::kLong},  {"f2", at::kHalf},  {"f4", at::kFloat},
    {"f8", at::kDouble}};

std::string supported_codes() {
  std::string out;
  for (const auto& t : kTypes) out += (out.empty() ? "" : ", ") + std::string(t.code);
  return out;
}

class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& where) : s_(text), where_(where) {}

  Header parse() {
    std::optional<std::string> descr;
    std::optional<bool> fortran;
    std::optional<std::vector<int64_t>> shape;
    expect('{');
    while (skip_space(), peek() != '}') {
      const auto key = quoted();
      expect(':');
      if (key == "descr") descr = quoted();
      else if (key == "fortran_order") fortran = boolean();
      else if (key == "shape") shape = tuple();
      else fail(c10::str("unknown key '", key, "' (expected descr, fortran_order, shape)"));
      skip_space();
      if (peek() == ',') ++i_;
    }
    if (!descr || !fortran || !shape)
      fail(c10::str("missing ", !descr ? "'descr'" : !fortran ? "'fortran_order'" : "'shape'"));
    Header h{at::kFloat, *fortran, *shape};
    read_descr(*descr, h);
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    // The header quoted without the padding and line end NumPy ends it with: one line.
    auto quoted = s_;
    while (!quoted.empty() && std::isspace(static_cast<unsigned char>(quoted.back()))) quoted.remove_suffix(1);
    throw InputError(c10::str(where_, ": header: ", what, " (header ", quoted, ")"));
  }
  void skip_space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  char peek() {
    skip_space();
    if (i_ >= s_.size()) fail("ends early");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(c10::str("expected '", c, "' at offset ", i_, ", found '", s_[i_], "'"));
    ++i_;
  }
  std::string quoted() {
    const char q = peek();
    if (q != '\'' && q != '"') fail(c10::str("expected a quoted string at offset ", i_));
    const auto end = s_.find(q, ++i_);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string out(s_.substr(i_, end - i_));
    i_ = end + 1;
    return out;
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}})
      if (s_.substr(i_, std::strlen(word)) == word) {
        i_ += std::strlen(word);
        return value;
      }
    fail(c10::str("fortran_order: expected True or False at offset ", i_));
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> dims;
    expect('(');
    while (peek() != ')') {
      int64_t v = 0;
      size_t digits = 0;
      for (; i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])); ++i_, ++digits) {
        if (v > (INT64_MAX - 9) / 10) fail("shape: a dimension too large");
        v = v * 10 + (s_[i_] - '0');
      }
      if (digits == 0) fail(c10::str("shape: expected a non-negative integer at offset ", i_));
      dims.push_back(v);
      if (peek() == ',') ++i_;
    }
    ++i_;
    return dims;
  }
  // descr's type into h: a number type of kTypes in either byte order, or a string
  // type 'U<n>' (n UCS-4 characters) or 'S<n>' (n bytes), as np.save writes labels.
  void read_descr(const std::string& descr, Header& h) const {
    if (descr.size() < 3) fail(c10::str("descr: expected a type like '<f4', found '", descr, "'"));
    const char order = descr[0];
    if (order != '<' && order != '|' && order != '=' && order != '>')
      fail(c10::str("descr '", descr, "': unknown byte order '", order, "'"));
    const std::string code = descr.substr(1);
    h.descr = descr;
    if (code[0] == 'U' || code[0] == 'S') {
      int64_t n = 0;
      for (size_t k = 1; k < code.size(); ++k) {
        if (!std::isdigit(static_cast<unsigned char>(code[k])) || n > (1 << 20))
          fail(c10::str("descr '", descr, "': expected a string type 'U<n>' or 'S<n>' of at most 1048576 characters"));
        n = n * 10 + (code[k] - '0');
      }
      if (n == 0) fail(c10::str("descr '", descr, "': expected a string type 'U<n>' or 'S<n>' with n >= 1"));
      h.dtype = at::kUInt32;
      h.chars = n;
      h.unicode = code[0] == 'U';
      h.itemsize = h.unicode ? 4 * n : n;
      h.big_endian = order == '>' && h.unicode;
      return;
    }
    for (const auto& t : kTypes)
      if (code == t.code) {
        h.dtype = t.dtype;
        h.itemsize = static_cast<int64_t>(c10::elementSize(t.dtype));
        h.big_endian = order == '>' && h.itemsize > 1;
        return;
      }
    fail(c10::str("descr '", descr, "': expected one of ", supported_codes(),
                  " (numbers, either byte order) or U<n>, S<n> (strings), found another type"));
  }

  std::string_view s_;
  const std::string& where_;
  size_t i_ = 0;
};

uint32_t little_endian(const unsigned char* p, size_t n) {
  uint32_t v = 0;
  for (size_t k = 0; k < n; ++k) v |= static_cast<uint32_t>(p[k]) << (8 * k);
  return v;
}

}  // namespace

std::vector<int64_t> Header::strides() const {
  // Row-major strides, or column-major for fortran_order (a transposed layout, no copy).
  std::vector<int64_t> out(shape.size(), 1);
  const auto n = static_cast<int64_t>(shape.size());
  if (fortran_order) {
    for (int64_t k = 1; k < n; ++k) out[k] = out[k - 1] * std::max<int64_t>(shape[k - 1], 1);
  } else {
    for (int64_t k = n - 2; k >= 0; --k) out[k] = out[k + 1] * std::max<int64_t>(shape[k + 1], 1);
  }
  return out;
}

Header parse(const unsigned char* bytes, size_t size, const Source& src) {
  const auto& where = src.name;
  if (size < kMagic.size() + 2 ||
      std::string_view(reinterpret_cast<const char*>(bytes), kMagic.size()) != kMagic)
    throw InputError(c10::str(where, ": not an .npy file (expected the magic \\x93NUMPY)"));
  const int major = bytes[6], minor = bytes[7];
  if (major < 1 || major > 3 || minor != 0)
    throw InputError(c10::str(where, ": format version ", major, ".", minor,
                              ": expected 1.0, 2.0 or 3.0"));
  const size_t len_bytes = major == 1 ? 2 : 4;
  if (size < 8 + len_bytes) throw InputError(c10::str(where, ": truncated header"));
  const size_t header_len = little_endian(bytes + 8, len_bytes);
  const size_t data_offset = 8 + len_bytes + header_len;
  if (data_offset > size)
    throw InputError(c10::str(where, ": truncated header: it declares ", header_len, " bytes, ",
                              src.noun, " has ", size - 8 - len_bytes));
  auto h = HeaderParser(std::string_view(reinterpret_cast<const char*>(bytes) + 8 + len_bytes,
                                         header_len), where)
               .parse();
  h.data_offset = data_offset;
  const int64_t item = h.itemsize;
  h.numel = 1;
  for (const auto d : h.shape) {
    if (d != 0 && h.numel > INT64_MAX / item / d)
      throw InputError(c10::str(where, ": shape: too many elements"));
    h.numel *= d;
  }
  const auto data_bytes = static_cast<int64_t>(size - data_offset);
  if (h.numel * item != data_bytes)
    throw InputError(c10::str(where, ": shape ", c10::IntArrayRef(h.shape), " of ",
                              h.chars > 0 ? h.descr : std::string(c10::toString(h.dtype)), " needs ",
                              h.numel * item, " data bytes, ", src.noun, " has ", data_bytes));
  return h;
}

namespace {

// Strings as uint32 code points [*shape, chars], in row-major order whatever the file's.
at::Tensor strings(const Header& h, const unsigned char* data) {
  std::vector<int64_t> sizes = h.shape;
  sizes.push_back(h.chars);
  auto out = at::empty(sizes, at::TensorOptions().dtype(at::kUInt32));
  auto* o = static_cast<uint32_t*>(out.data_ptr());
  const auto strides = h.strides();
  const auto rank = static_cast<int64_t>(h.shape.size());
  std::vector<int64_t> index(h.shape.size(), 0);
  for (int64_t e = 0; e < h.numel; ++e) {
    int64_t at = 0;  // the element's place in the file
    for (int64_t k = 0; k < rank; ++k) at += index[k] * strides[k];
    const unsigned char* p = data + at * h.itemsize;
    for (int64_t c = 0; c < h.chars; ++c, ++o) {
      if (!h.unicode) {
        *o = p[c];
      } else {
        const unsigned char* q = p + 4 * c;
        *o = h.big_endian ? uint32_t{q[0]} << 24 | uint32_t{q[1]} << 16 | uint32_t{q[2]} << 8 | q[3]
                          : uint32_t{q[3]} << 24 | uint32_t{q[2]} << 16 | uint32_t{q[1]} << 8 | q[0];
      }
    }
    for (int64_t k = rank - 1; k >= 0 && ++index[k] == h.shape[k]; --k) index[k] = 0;
  }
  return out;
}

}  // namespace

at::Tensor wrap(const unsigned char* bytes, size_t size, std::shared_ptr<const void> owner,
                const Source& src) {
  const Header h = parse(bytes, size, src);
  const unsigned char* data = bytes + h.data_offset;
  if (h.chars > 0) return strings(h, data);
  const auto options = at::TensorOptions().dtype(h.dtype);
  if (h.big_endian || reinterpret_cast<uintptr_t>(data) % c10::elementSize(h.dtype) != 0) {
    auto copy = at::empty_strided(h.shape, h.strides(), options);
    if (h.numel > 0) std::memcpy(copy.data_ptr(), data, size - h.data_offset);
    if (h.big_endian) {  // each element's bytes reversed, in place
      auto* b = static_cast<unsigned char*>(copy.data_ptr());
      for (int64_t e = 0; e < h.numel; ++e, b += h.itemsize) std::reverse(b, b + h.itemsize);
    }
    return copy;
  }
  // The tensor never writes through the pointer into a read-only page: every owner here
  // is a private writable mapping or a heap buffer.
  return at::from_blob(const_cast<unsigned char*>(data), h.shape, h.strides(),
                       [owner = std::move(owner)](void*) mutable { owner.reset(); }, options);
}

std::string preamble(const at::Tensor& c, const std::string& path) {
  std::string code;
  for (const auto& k : kTypes)
    if (k.dtype == c.scalar_type()) code = k.code;
  if (code.empty())
    throw InputError(c10::str(path, ": cannot write ", c.scalar_type(),
                              " as .npy: NumPy has no such dtype (convert it, e.g. to float32)"));
  std::string shape = "(";
  for (const auto d : c.sizes()) shape += std::to_string(d) + ", ";
  if (c.dim() > 1) shape.resize(shape.size() - 2);  // (3,) for one dimension, (3, 4) for two
  else if (c.dim() == 1) shape.resize(shape.size() - 1);
  shape += ")";
  std::string header = c10::str("{'descr': '", code[1] == '1' ? '|' : '<', code,
                                "', 'fortran_order': False, 'shape': ", shape, ", }");
  // Padded with spaces and ended by '\n' so the data starts at a multiple of 64 bytes.
  const bool v2 = header.size() + 1 + 10 > 65535;
  const size_t prefix = v2 ? 12 : 10;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out(kMagic);
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  for (size_t k = 0; k < (v2 ? 4u : 2u); ++k)
    out += static_cast<char>((header.size() >> (8 * k)) & 0xff);
  return out + header;
}

Mapping::~Mapping() {
  if (data) ::munmap(data, size);
}

std::shared_ptr<const Mapping> map_file(const std::string& path, const std::string& kind) {
  // O_NONBLOCK: a FIFO's open returns at once instead of waiting for a writer; fstat
  // then refuses it, as every file that is not a regular one.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw InputError(c10::str(path, ": cannot open (", std::strerror(errno), ")"));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    files::require_regular_file(path, kind);  // says what it is instead
    throw InputError(c10::str(path, ": expected a regular ", kind, " file"));
  }
  auto m = std::make_shared<Mapping>();
  m->size = static_cast<size_t>(st.st_size);
  if (m->size > 0) {
    // Private and writable: writes to a tensor go to copies of the pages, never the file.
    void* base = ::mmap(nullptr, m->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (base == MAP_FAILED) {
      ::close(fd);
      throw InputError(c10::str(path, ": cannot map (", std::strerror(errno), ")"));
    }
    m->data = static_cast<unsigned char*>(base);
  }
  ::close(fd);  // the mapping keeps the file
  return m;
}

}  // namespace npy

at::Tensor read_npy(const std::string& path) {
  const auto m = npy::map_file(path, ".npy");
  return npy::wrap(m->data, m->size, m, {path});
}

void write_npy(const std::string& path, const at::Tensor& t) {
  const auto c = t.detach().to(at::kCPU).contiguous();
  std::string out = npy::preamble(c, path);
  out.append(static_cast<const char*>(c.const_data_ptr()), c.numel() * c.element_size());
  files::write_synced(path, out);
}

}  // namespace kiln::data
