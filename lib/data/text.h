// A text corpus for character-level language models: UTF-8 files read and checked, a
// byte or character vocabulary that is saved with a run, and block_size windows of the
// token stream with their next-token targets.
#pragma once
#include <ATen/core/Tensor.h>

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::data {

/// The text of a UTF-8 file, or of every regular file under a folder (recursively, in
/// sorted path order, hidden files and folders — names starting with '.' — skipped),
/// joined with a '\n' after any file that does not end with one. Each file must be
/// strict UTF-8: no overlong forms, surrogates (U+D800..U+DFFF), code points above
/// U+10FFFF, stray continuation bytes or truncated sequences; the error names the file,
/// the byte offset, the line and the column (1-based, in characters) of the first bad
/// sequence. A leading byte-order mark (EF BB BF) is dropped. No text at all (an empty
/// file, a folder of empty or no files) throws kiln::InputError. In a folder, files whose
/// name matches one of the shell patterns in `exclude` (fnmatch: * ? [...]) are skipped.
/// `utf8 = false` reads the bytes as they are (a byte vocabulary's corpus: any bytes
/// encode), with no check.
/// Example: auto text = kiln::data::read_text("/usr/share/games/fortunes", {"*.dat", "*.u8"});
std::string read_text(const std::string& path, const std::vector<std::string>& exclude = {},
                      bool utf8 = true);

/// Checks that `bytes` are strict UTF-8 (as read_text does); the first bad sequence
/// throws kiln::InputError: "SOURCE: invalid UTF-8 at byte N (line L, column C): bytes
/// XX: why". Example: check_utf8(files::read(path), path);
void check_utf8(std::string_view bytes, const std::string& source);

/// Token ids for text. `bytes()`: 256 ids, a byte's id is its value, any text encodes.
/// `characters(text)`: the sorted distinct Unicode code points of `text` (the training
/// text), id = rank. A character missing from the vocabulary is an error, not an
/// "unknown" id: a model cannot learn or generate an id that stands for many characters,
/// so the vocabulary should be built from all the text it will encode (or be bytes()).
/// Example: auto v = Vocabulary::characters(text); at::Tensor ids = v.encode(text);
class Vocabulary {
 public:
  enum class Kind { kBytes, kCharacters };

  static Vocabulary bytes();
  /// Throws kiln::InputError for text that is empty or not UTF-8.
  static Vocabulary characters(std::string_view text);

  Kind kind() const { return kind_; }
  int64_t size() const;
  /// The code points by id (empty for bytes()).
  const std::vector<char32_t>& characters() const { return chars_; }

  /// ids: int64 (N), one per byte (bytes()) or per character. A character not in the
  /// vocabulary, or text that is not UTF-8 for characters(), throws kiln::InputError
  /// naming it (U+XXXX) and its byte offset, line and column in `text`.
  at::Tensor encode(std::string_view text) const;
  /// The text of ids (any integer dtype, 1-D). For bytes() the bytes as they are, which
  /// need not be UTF-8 when a sequence was cut mid-character. An id outside
  /// [0, size()) is a caller's mistake (c10::Error).
  std::string decode(const at::Tensor& ids) const;
  /// The text of one id (decode of several is these side by side; a byte vocabulary's
  /// may be part of a UTF-8 sequence). Example: vocab.token_text(7) == "a"
  std::string token_text(int64_t id) const;

  /// {"type": "bytes", "size": 256} or {"type": "characters", "size": N,
  /// "characters": "\n !..."}: the characters as one UTF-8 string, in id order.
  nlohmann::json to_json() const;
  /// Checks every field (type known, size matching, characters strictly increasing
  /// and valid, no unknown keys); a bad one throws kiln::InputError naming `source`
  /// (the file it came from) and the field.
  static Vocabulary from_json(const nlohmann::json& j, const std::string& source = "vocabulary");

  bool operator==(const Vocabulary& other) const {
    return kind_ == other.kind_ && chars_ == other.chars_;
  }

 private:
  Vocabulary(Kind kind, std::vector<char32_t> chars);
  int64_t id_of(char32_t c) const;  // −1 when absent
  void append_text(std::string& out, int64_t id) const;  // id checked by the caller

  Kind kind_;
  std::vector<char32_t> chars_;     // sorted, distinct
  std::vector<int32_t> ascii_ids_;  // ids of U+0000..U+007F, −1 when absent
};

/// Training windows over a token stream, as views of it (no copy: as_strided over the
/// contiguous tokens, so N windows cost no memory beyond the tokens; they overlap, so
/// treat them as read-only, and gather a batch with index_select, which copies only the
/// batch). Window i starts at token i·stride.
struct Windows {
  at::Tensor x;           // (N, block_size) int64: the input tokens
  at::Tensor targets;     // (N, block_size) int64: x shifted by one, next-token targets (GPT)
  at::Tensor next_token;  // (N) int64: the token after each window (a classifier's label)
};

/// Cuts `tokens` (int64, 1-D) into every window of block_size tokens that has a token
/// after it: N = (len − block_size − 1) / stride + 1. A corpus shorter than
/// block_size + 1 tokens throws kiln::InputError naming both numbers; block_size or
/// stride below 1, or tokens that are not 1-D int64, are a caller's mistake (c10::Error).
/// Example: auto w = make_windows(vocab.encode(text), 256, 256);  // w.x: (N, 256)
Windows make_windows(const at::Tensor& tokens, int64_t block_size, int64_t stride);

/// How many windows make_windows cuts from `tokens` tokens: (tokens − block_size − 1) / stride + 1
/// (at least block_size + 1 tokens). Example: window_count(1000, 128, 128) == 7
inline int64_t window_count(int64_t tokens, int64_t block_size, int64_t stride) {
  return (tokens - block_size - 1) / stride + 1;
}

}  // namespace kiln::data
