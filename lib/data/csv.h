// A strict reader of delimited text tables (RFC 4180 CSV and its tab- or
// semicolon-separated cousins), so a user's own table becomes a data set with every
// malformed line named by file, line and column.
//
// Ours, not a library's: Debian's libcsv (last release 2013) parses through
// callbacks that report no line or column for an error, and fast-cpp-csv-parser
// (libfccp-dev) fixes the column count at compile time. The grammar is small; the
// value here is in the checks and the messages.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::data {

struct CsvOptions {
  char delimiter = ',';
};

/// A table as text: a header and rows of fields. Fields are views into the file's
/// bytes (or into `unquoted` for quoted fields with doubled quotes), so a table
/// costs the file once plus 16 bytes a field.
struct CsvTable {
  std::string path;
  char delimiter = ',';  // the one it was read with
  std::vector<std::string> header;
  /// rows × header.size() fields, row-major.
  std::vector<std::string_view> fields;
  /// The 1-based line each row starts on (the header is line 1 of the file, unless
  /// blank lines precede it).
  std::vector<int64_t> lines;
  int64_t rows() const { return static_cast<int64_t>(lines.size()); }
  int64_t columns() const { return static_cast<int64_t>(header.size()); }
  std::string_view at(int64_t row, int64_t column) const {
    return fields[static_cast<size_t>(row * columns() + column)];
  }

  // Storage the views point into (held by pointer: a moved table keeps its views).
  std::unique_ptr<const std::string> bytes;
  std::unique_ptr<std::deque<std::string>> unquoted;
};

/// Reads `path`: a header row, then data rows with as many fields each. Accepts a
/// UTF-8 byte order mark, LF or CRLF line ends, a last line with or without a line
/// end, quoted fields (delimiters, line ends and doubled quotes "" inside quotes),
/// and skips blank lines. Anything else — an empty file, a header without data rows,
/// a ragged row, an unterminated quote, a quote inside an unquoted field, text after
/// a closing quote, an empty or repeated column name — throws kiln::InputError
/// naming the file, the line and column, what was expected and what was found.
/// Example: auto table = kiln::data::read_csv("penguins.csv");
CsvTable read_csv(const std::string& path, const CsvOptions& options = {});

/// For a header read as one column: if another common delimiter (a tab ';' ',' '|')
/// splits it into several, the advice to set data.delimiter to it, starting "; ";
/// else "". Example: delimiter_hint(t) == "; the header is one column, which ';'
/// would split into 4: set data.delimiter = \";\""
std::string delimiter_hint(const CsvTable& table);

/// Parses text already in memory; `name` stands for the file in messages.
CsvTable parse_csv(std::string bytes, const std::string& name, const CsvOptions& options = {});

}  // namespace kiln::data
