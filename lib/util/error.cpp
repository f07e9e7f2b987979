// IoError's messages, and printable(): a UTF-8 validator that escapes what it
// cannot pass on.
#include "util/error.h"

#include <cstdio>
#include <cstring>

namespace kiln {

IoError::IoError(const std::string& path, const std::string& action, int error)
    : std::runtime_error(path + ": cannot " + action + ": " + std::strerror(error)), error_(error) {}

namespace {

// libstdc++ says "filesystem error: cannot create directory: No space left on device
// [a] [b]": the middle part, which names the action and the reason.
std::string filesystem_message(const std::filesystem::filesystem_error& e) {
  std::string what = e.what();
  const std::string prefix = "filesystem error: ";
  if (what.starts_with(prefix)) what.erase(0, prefix.size());
  const auto bracket = what.find(" [");
  if (bracket != std::string::npos) what.erase(bracket);
  std::string message = e.path1().empty() ? what : e.path1().string() + ": " + what;
  if (!e.path2().empty()) message += " (to " + e.path2().string() + ")";
  return message;
}

}  // namespace

IoError::IoError(const std::filesystem::filesystem_error& e)
    : std::runtime_error(filesystem_message(e)), error_(e.code().value()) {}

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto escape = [&](unsigned char c) {
    char buf[5];
    std::snprintf(buf, sizeof buf, "\\x%02X", c);
    out += buf;
  };
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {  // ASCII: controls other than \n and \t escaped (no terminal sequences)
      if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F) escape(c);
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    // The length a lead byte announces, and the smallest code point of that length
    // (overlong forms and surrogates are not valid UTF-8).
    const size_t n = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    bool ok = n > 0 && i + n <= text.size();
    uint32_t cp = n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (size_t k = 1; ok && k < n; ++k) {
      const auto b = static_cast<unsigned char>(text[i + k]);
      ok = (b & 0xC0) == 0x80;
      cp = (cp << 6) | (b & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && cp >= kMin[n] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (ok) {
      out.append(text.substr(i, n));
      i += n;
    } else {
      escape(c);
      ++i;
    }
  }
  return out;
}

}  // namespace kiln
