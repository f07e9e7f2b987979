// read_text, Vocabulary and make_windows: one strict UTF-8 decoder (RFC 3629's table
// of well-formed sequences) serves the corpus check, the character vocabulary, encode
// and the vocabulary's JSON.
#include "data/text.h"

#include <fnmatch.h>

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/utf8.h"
#include "util/error.h"
#include "util/files.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

// "U+00E9 'é'" (the glyph only for printable characters).
std::string describe(char32_t c) {
  char s[16];
  std::snprintf(s, sizeof s, "U+%04X", static_cast<unsigned>(c));
  std::string out = s;
  if (c >= 0x20 && c != 0x7f && !(c >= 0x80 && c < 0xa0)) {
    out += " '";
    append_utf8(out, c);
    out += "'";
  }
  return out;
}

// "byte 123 (line 4, column 7)": lines and columns from 1, columns in characters, of
// an offset in valid UTF-8 text up to it.
std::string position(std::string_view text, size_t offset) {
  size_t line = 1, column = 1;
  for (size_t k = 0; k < offset; ++k) {
    const auto b = static_cast<unsigned char>(text[k]);
    if (b == '\n') ++line, column = 1;
    else if ((b & 0xc0) != 0x80) ++column;
  }
  return c10::str("byte ", offset, " (line ", line, ", column ", column, ")");
}

[[noreturn]] void invalid_utf8(const std::string& source, std::string_view text, size_t offset,
                               const Utf8& u) {
  std::string bytes;
  for (size_t k = 0; k < u.length && offset + k < text.size(); ++k) {
    char hex[4];
    std::snprintf(hex, sizeof hex, "%02X", static_cast<unsigned char>(text[offset + k]));
    if (k > 0) bytes += ' ';
    bytes += hex;
  }
  throw InputError(c10::str(source, ": invalid UTF-8 at ", position(text, offset), ": bytes ",
                            bytes, ": ", u.error));
}

// Calls f(code point, byte offset) for each character; the first bad sequence throws.
template <typename F>
void for_each_character(std::string_view text, const std::string& source, F&& f) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    const Utf8 u = p[i] < 0x80 ? Utf8{p[i], 1, nullptr} : next_utf8(p + i, text.size() - i);
    if (u.error) invalid_utf8(source, text, i, u);
    f(u.code, i);
    i += u.length;
  }
}

// Whether a file name matches one of the shell patterns (fnmatch: * ? [...]).
bool excluded(const std::string& name, const std::vector<std::string>& patterns) {
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::string& p) { return ::fnmatch(p.c_str(), name.c_str(), 0) == 0; });
}

// The files of a folder in sorted path order, hidden names (".x") and what is under
// them skipped, and files whose name matches an `exclude` pattern.
std::vector<std::string> files_under(const std::string& folder, const std::vector<std::string>& exclude) {
  std::vector<std::string> out;
  for (auto it = fs::recursive_directory_iterator(folder); it != fs::recursive_directory_iterator();
       ++it) {
    const auto name = it->path().filename().string();
    const bool hidden = name.starts_with(".");
    if (hidden && it->is_directory()) it.disable_recursion_pending();
    if (!hidden && it->is_regular_file() && !excluded(name, exclude)) out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

void check_utf8(std::string_view bytes, const std::string& source) {
  for_each_character(bytes, source, [](char32_t, size_t) {});
}

std::string read_text(const std::string& path, const std::vector<std::string>& exclude, bool utf8) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) throw InputError(c10::str(path, ": no such file or folder"));
  const bool folder = fs::is_directory(status);
  if (!folder) files::require_regular_file(path, "text");  // not a FIFO, not /dev/zero
  const auto paths = folder ? files_under(path, exclude) : std::vector<std::string>{path};
  if (paths.empty())
    throw InputError(c10::str(path, ": no files in this folder (hidden ones are skipped",
                              exclude.empty() ? "" : ", and those data.exclude matches", ")"));
  std::string text;
  for (const auto& file : paths) {
    std::string bytes = files::read(file);
    try {
      if (utf8) check_utf8(bytes, file);
    } catch (const InputError& e) {
      // What to do about it: a stray binary file in a folder, or text in another encoding.
      const auto name = fs::path(file).filename().string();
      throw InputError(c10::str(
          e.what(), folder ? c10::str("; leave it out of the folder with data.exclude = [\"", name,
                                      "\"] (patterns such as \"*.bin\" match names), convert it")
                           : std::string("; convert it"),
          " to UTF-8 (iconv -f latin1 -t utf-8 if it is Latin-1), or read bytes as they are with "
          "data.vocabulary = \"byte\""));
    }
    std::string_view body = bytes;
    if (body.starts_with("\xEF\xBB\xBF")) body.remove_prefix(3);  // a byte-order mark
    if (!text.empty() && text.back() != '\n' && !body.empty()) text += '\n';
    text += body;
  }
  if (text.empty())
    throw InputError(!folder ? c10::str(path, ": empty corpus: the file holds no text")
                             : c10::str(path, ": empty corpus: the ", paths.size(),
                                        paths.size() == 1 ? " file in this folder holds no text"
                                                          : " files in this folder hold no text"));
  return text;
}

Vocabulary::Vocabulary(Kind kind, std::vector<char32_t> chars)
    : kind_(kind), chars_(std::move(chars)), ascii_ids_(128, -1) {
  for (size_t id = 0; id < chars_.size() && chars_[id] < 128; ++id)
    ascii_ids_[chars_[id]] = static_cast<int32_t>(id);
}

Vocabulary Vocabulary::bytes() { return Vocabulary(Kind::kBytes, {}); }

Vocabulary Vocabulary::characters(std::string_view text) {
  // One bit per code point, read back 64 at a time: a fixed cost of 17k words, not of
  // 1.1M bits (which made a short text's vocabulary cost milliseconds).
  std::vector<uint64_t> present(0x110000 / 64, 0);
  for_each_character(text, "text", [&](char32_t c, size_t) { present[c / 64] |= uint64_t{1} << (c % 64); });
  std::vector<char32_t> chars;
  for (size_t w = 0; w < present.size(); ++w)
    for (uint64_t bits = present[w]; bits; bits &= bits - 1)
      chars.push_back(static_cast<char32_t>(w * 64 + std::countr_zero(bits)));
  if (chars.empty())
    throw InputError("text: empty: a character vocabulary needs at least one character");
  return Vocabulary(Kind::kCharacters, std::move(chars));
}

int64_t Vocabulary::size() const {
  return kind_ == Kind::kBytes ? 256 : static_cast<int64_t>(chars_.size());
}

int64_t Vocabulary::id_of(char32_t c) const {
  if (c < 128) return ascii_ids_[c];
  const auto it = std::lower_bound(chars_.begin(), chars_.end(), c);
  return it != chars_.end() && *it == c ? it - chars_.begin() : -1;
}

at::Tensor Vocabulary::encode(std::string_view text) const {
  if (kind_ == Kind::kBytes) {
    auto ids = at::empty({static_cast<int64_t>(text.size())}, at::kLong);
    auto* out = ids.data_ptr<int64_t>();
    for (size_t k = 0; k < text.size(); ++k) out[k] = static_cast<unsigned char>(text[k]);
    return ids;
  }
  // Valid UTF-8 has one non-continuation byte per character, and decoding stops at
  // the first invalid byte, so this count bounds what is written.
  const auto n = std::count_if(text.begin(), text.end(), [](char b) { return (b & 0xc0) != 0x80; });
  auto ids = at::empty({static_cast<int64_t>(n)}, at::kLong);
  auto* out = ids.data_ptr<int64_t>();
  for_each_character(text, "text", [&](char32_t c, size_t offset) {
    const int64_t id = id_of(c);
    if (id < 0)
      throw InputError(c10::str("text: ", position(text, offset), ": character ", describe(c),
                                " is not in the vocabulary of ", size(), " characters"));
    *out++ = id;
  });
  return ids;
}

std::string Vocabulary::decode(const at::Tensor& ids) const {
  TORCH_CHECK(ids.dim() == 1 && at::isIntegralType(ids.scalar_type(), /*includeBool=*/false),
              "Vocabulary::decode: expected 1-D integer ids, got ", ids.scalar_type(), ids.sizes());
  const auto c = ids.to(at::kCPU, at::kLong).contiguous();
  const auto* p = c.const_data_ptr<int64_t>();
  std::string out;
  out.reserve(c.numel());
  for (int64_t k = 0; k < c.numel(); ++k) {
    TORCH_CHECK(p[k] >= 0 && p[k] < size(), "Vocabulary::decode: id ", p[k], " at index ", k,
                " is outside [0, ", size(), ")");
    append_text(out, p[k]);
  }
  return out;
}

std::string Vocabulary::token_text(int64_t id) const {
  TORCH_CHECK(id >= 0 && id < size(), "Vocabulary::token_text: id ", id, " is outside [0, ", size(), ")");
  std::string out;
  append_text(out, id);
  return out;
}

void Vocabulary::append_text(std::string& out, int64_t id) const {
  if (kind_ == Kind::kBytes) out += static_cast<char>(id);
  else append_utf8(out, chars_[id]);
}

nlohmann::json Vocabulary::to_json() const {
  if (kind_ == Kind::kBytes) return {{"type", "bytes"}, {"size", 256}};
  std::string chars;
  for (const auto c : chars_) append_utf8(chars, c);
  return {{"type", "characters"}, {"size", size()}, {"characters", chars}};
}

Vocabulary Vocabulary::from_json(const nlohmann::json& j, const std::string& source) {
  const auto fail = [&](const std::string& what) -> void {
    throw InputError(c10::str(source, ": vocabulary: ", what));
  };
  if (!j.is_object()) fail(c10::str("expected a JSON object, found ", j.type_name()));
  for (const auto& [key, value] : j.items())
    if (key != "type" && key != "size" && key != "characters")
      fail(c10::str("unknown key '", key, "' (expected type, size, characters)"));
  if (!j.contains("type") || !j["type"].is_string())
    fail("'type': expected \"bytes\" or \"characters\"");
  const auto type = j["type"].get<std::string>();
  if (type != "bytes" && type != "characters")
    fail(c10::str("'type': expected \"bytes\" or \"characters\", found \"", type, "\""));
  if (!j.contains("size") || !j["size"].is_number_integer())
    fail("'size': expected an integer");
  const auto size = j["size"].get<int64_t>();
  if (type == "bytes") {
    if (size != 256) fail(c10::str("'size': expected 256 for type \"bytes\", found ", size));
    if (j.contains("characters")) fail("'characters': not expected for type \"bytes\"");
    return bytes();
  }
  if (!j.contains("characters") || !j["characters"].is_string())
    fail("'characters': expected a string of the vocabulary's characters in id order");
  const auto& text = j["characters"].get_ref<const std::string&>();
  std::vector<char32_t> chars;
  for_each_character(text, source + ": vocabulary: 'characters'", [&](char32_t c, size_t offset) {
    if (!chars.empty() && c <= chars.back())
      fail(c10::str("'characters': expected strictly increasing code points, found ", describe(c),
                    " after ", describe(chars.back()), " at byte ", offset));
    chars.push_back(c);
  });
  if (chars.empty()) fail("'characters': expected at least one character, found none");
  if (size != static_cast<int64_t>(chars.size()))
    fail(c10::str("'size': ", size, ", but 'characters' holds ", chars.size()));
  return Vocabulary(Kind::kCharacters, std::move(chars));
}

Windows make_windows(const at::Tensor& tokens, int64_t block_size, int64_t stride) {
  TORCH_CHECK(tokens.dim() == 1 && tokens.scalar_type() == at::kLong,
              "make_windows: expected 1-D int64 tokens, got ", tokens.scalar_type(),
              tokens.sizes());
  TORCH_CHECK(block_size >= 1 && stride >= 1,
              "make_windows: expected block_size ≥ 1 and stride ≥ 1, got ", block_size, " and ",
              stride);
  const int64_t n = tokens.size(0);
  if (n < block_size + 1)
    throw InputError(c10::str("text: the corpus has ", n, " tokens, block_size ", block_size,
                              " needs at least ", block_size + 1,
                              " (a window and the token after it)"));
  const auto t = tokens.contiguous();
  const int64_t count = window_count(n, block_size, stride);
  const int64_t base = t.storage_offset();
  return {t.as_strided({count, block_size}, {stride, 1}, base),
          t.as_strided({count, block_size}, {stride, 1}, base + 1),
          t.as_strided({count}, {stride}, base + block_size)};
}

}  // namespace kiln::data
