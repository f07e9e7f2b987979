// UTF-8 by hand (internal to lib/data): one strict decoder (RFC 3629's table of
// well-formed sequences) and the encoder, shared by the text corpus reader and the
// NumPy string labels. Ours: the C++ standard library's converters are deprecated and
// none says why a sequence is malformed.
#pragma once
#include <cstddef>
#include <string>

namespace kiln::data {

// One decoded sequence: the code point and its length, or why the bytes are not UTF-8.
struct Utf8 {
  char32_t code = 0;
  size_t length = 1;
  const char* error = nullptr;
};

// Decodes the sequence at p[0, n), n ≥ 1. Well-formed sequences (RFC 3629, section 4):
// 00..7F | C2..DF 80..BF | E0 A0..BF 80..BF | E1..EC,EE..EF (80..BF)×2 | ED 80..9F 80..BF
// | F0 90..BF (80..BF)×2 | F1..F3 (80..BF)×3 | F4 80..8F (80..BF)×2.
inline Utf8 next_utf8(const unsigned char* p, size_t n) {
  const unsigned char b = p[0];
  if (b < 0x80) return {b, 1, nullptr};
  if (b < 0xc0) return {0, 1, "a continuation byte (0x80..0xBF) with no lead byte before it"};
  if (b < 0xc2)
    return {0, 1, "an overlong encoding (0xC0/0xC1 lead a 2-byte form of U+0000..U+007F)"};
  if (b > 0xf4) return {0, 1, b < 0xf8 ? "a lead byte for a code point above U+10FFFF"
                                       : "a byte that never appears in UTF-8 (0xF8..0xFF)"};
  const size_t length = b < 0xe0 ? 2 : b < 0xf0 ? 3 : 4;
  char32_t code = b & (0xff >> (length + 1));
  for (size_t k = 1; k < length; ++k) {
    if (k >= n || (p[k] & 0xc0) != 0x80)
      return {0, k,
              k >= n ? "a truncated sequence: the text ends inside it"
                     : "a truncated sequence: a lead byte without all its continuation bytes"};
    code = (code << 6) | (p[k] & 0x3f);
  }
  if ((length == 3 && code < 0x800) || (length == 4 && code < 0x10000))
    return {0, length, "an overlong encoding (a longer form of a smaller code point)"};
  if (code >= 0xd800 && code <= 0xdfff)
    return {0, length, "a UTF-16 surrogate (U+D800..U+DFFF), not a character"};
  if (code > 0x10ffff) return {0, length, "a code point above U+10FFFF"};
  return {code, length, nullptr};
}

/// Appends code point c (at most U+10FFFF, no surrogate) as UTF-8.
inline void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xc0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xe0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  }
}

}  // namespace kiln::data
