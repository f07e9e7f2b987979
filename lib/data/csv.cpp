// read_csv(): one pass over the bytes with a four-state machine (field start,
// unquoted, quoted, after a closing quote); fields are views into the bytes.
#include "data/csv.h"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "data/text.h"
#include "util/error.h"
#include "util/files.h"

namespace kiln::data {
namespace {

// A character as a message shows it.
std::string shown(char c) {
  if (c == '\n') return "a line end";
  if (c == '\r') return "a carriage return";
  if (c == '\t') return "a tab";
  if (static_cast<unsigned char>(c) < 0x20) return c10::str("byte 0x", std::hex, int(c));
  return c10::str("'", c, "'");
}

class Parser {
 public:
  Parser(const std::string& bytes, std::deque<std::string>& unquoted, const std::string& name,
         char delim)
      : s_(bytes), unquoted_(unquoted), name_(name), delim_(delim) {
    if (s_.size() >= 3 && s_.compare(0, 3, "\xEF\xBB\xBF") == 0) pos_ = 3;  // a UTF-8 BOM
  }

  // The next record's fields (empty at the end of the input); `line` gets the line
  // it starts on. Blank lines are skipped.
  bool next(std::vector<std::string_view>& out, int64_t& line) {
    out.clear();
    column_ = 0;
    while (pos_ < s_.size() && (s_[pos_] == '\n' || s_[pos_] == '\r')) eat_line_end();
    if (pos_ >= s_.size()) return false;
    line = line_;
    for (;;) {
      out.push_back(field());
      if (pos_ >= s_.size()) return true;
      const char c = s_[pos_];
      if (c == delim_) {
        ++pos_;
        continue;
      }
      eat_line_end();  // field() stops only at a delimiter, a line end or the end
      return true;
    }
  }

 private:
  [[noreturn]] void fail(int64_t line, const std::string& what) const {
    throw InputError(c10::str(name_, ": line ", line, ", column ", column_, ": ", what));
  }

  void eat_line_end() {
    if (s_[pos_] == '\r' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '\n') ++pos_;
    ++pos_;
    ++line_;
  }

  std::string_view field() {
    ++column_;
    if (pos_ < s_.size() && s_[pos_] == '"') return quoted();
    const size_t start = pos_;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == delim_ || c == '\n' || c == '\r') break;
      if (c == '"')
        fail(line_, "a quote inside an unquoted field; expected the whole field in quotes "
                    "(\"a \"\"quoted\"\" word\")");
      ++pos_;
    }
    return std::string_view(s_).substr(start, pos_ - start);
  }

  // A field in quotes: delimiters and line ends inside are data, "" is one quote.
  std::string_view quoted() {
    const int64_t opened = line_;
    ++pos_;
    const size_t start = pos_;
    std::string* copy = nullptr;  // only fields with "" need their own bytes
    for (;;) {
      if (pos_ >= s_.size())
        fail(opened, "the quote opened here is never closed; expected a closing '\"' before "
                     "the end of the file");
      const char c = s_[pos_];
      if (c == '"') {
        if (pos_ + 1 < s_.size() && s_[pos_ + 1] == '"') {
          if (!copy) copy = &unquoted_.emplace_back(s_.substr(start, pos_ - start));
          copy->push_back('"');
          pos_ += 2;
          continue;
        }
        const size_t end = pos_++;
        if (pos_ < s_.size() && s_[pos_] != delim_ && s_[pos_] != '\n' && s_[pos_] != '\r')
          fail(line_, c10::str("expected a delimiter ", shown(delim_),
                               " or a line end after the closing quote, found ", shown(s_[pos_])));
        if (copy) return *copy;
        return std::string_view(s_).substr(start, end - start);
      }
      if (c == '\n') ++line_;
      if (copy) copy->push_back(c);
      ++pos_;
    }
  }

  const std::string& s_;
  std::deque<std::string>& unquoted_;
  const std::string& name_;
  const char delim_;
  size_t pos_ = 0;
  int64_t line_ = 1;
  int64_t column_ = 0;
};

}  // namespace

CsvTable parse_csv(std::string bytes, const std::string& name, const CsvOptions& options) {
  // Names, categories and labels become JSON (data.json, metrics) and terminal text.
  try {
    check_utf8(bytes, name);
  } catch (const InputError& e) {
    throw InputError(c10::str(e.what(), "; expected UTF-8: convert the table (iconv -f latin1 -t utf-8 "
                                        "if it is Latin-1, or save it as UTF-8 CSV)"));
  }
  CsvTable t;
  t.path = name;
  t.delimiter = options.delimiter;
  t.bytes = std::make_unique<const std::string>(std::move(bytes));
  t.unquoted = std::make_unique<std::deque<std::string>>();
  const char delim = options.delimiter;
  if (delim == '"' || delim == '\n' || delim == '\r')
    throw InputError(c10::str(name, ": data.delimiter: expected a character other than a quote "
                                    "or a line end, found ", shown(delim)));
  Parser parser(*t.bytes, *t.unquoted, name, delim);

  std::vector<std::string_view> record;
  int64_t line = 0;
  if (!parser.next(record, line))
    throw InputError(c10::str(name, ": expected a header row and data rows, found an empty file"));
  std::set<std::string_view> seen;
  for (size_t c = 0; c < record.size(); ++c) {
    const auto h = record[c];
    if (h.empty())
      throw InputError(c10::str(name, ": line ", line, ", column ", c + 1,
                                ": expected a column name in the header, found an empty one"));
    if (!seen.insert(h).second)
      throw InputError(c10::str(name, ": line ", line, ", column ", c + 1, ": the column name '",
                                h, "' is repeated; expected unique names"));
    t.header.emplace_back(h);
  }
  const int64_t width = t.columns();
  for (;;) {
    if (!parser.next(record, line)) break;
    if (static_cast<int64_t>(record.size()) != width)
      throw InputError(c10::str(name, ": line ", line, ": expected ", width, " fields (as the "
                                "header has), found ", record.size(), delimiter_hint(t)));
    t.fields.insert(t.fields.end(), record.begin(), record.end());
    t.lines.push_back(line);
  }
  if (t.lines.empty())
    throw InputError(c10::str(name, ": expected data rows after the header, found none"));
  return t;
}

std::string delimiter_hint(const CsvTable& table) {
  if (table.columns() != 1) return "";
  const std::string& h = table.header[0];
  for (const char d : {'\t', ';', ',', '|'}) {
    if (d == table.delimiter) continue;
    const auto parts = std::count(h.begin(), h.end(), d) + 1;
    if (parts > 1)
      return c10::str("; the header is one column, which ", shown(d), " would split into ", parts,
                      ": set data.delimiter = \"", d == '\t' ? std::string("\\t") : std::string(1, d), "\"");
  }
  return "";
}

CsvTable read_csv(const std::string& path, const CsvOptions& options) {
  if (!std::filesystem::exists(path)) throw InputError(c10::str(path, ": no such file"));
  files::require_regular_file(path, "CSV");
  return parse_csv(files::read(path), path, options);
}

}  // namespace kiln::data
