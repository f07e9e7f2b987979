// CSV: the grammar real tables use (quotes, delimiters and line ends inside quotes,
// CRLF, a BOM, a missing last line end, blank lines, other delimiters) is read; every
// malformed table is refused naming the file, the line and the column.
#include <catch2/catch.hpp>

#include "data/csv.h"
#include "support.h"
#include "util/error.h"

namespace {

using kiln::data::parse_csv;

std::string error_of(const std::string& text, char delimiter = ',') {
  INFO("the table: " << text);
  return kiln::test::input_error_of([&] { parse_csv(text, "t.csv", {delimiter}); });
}

}  // namespace

TEST_CASE("CSV: quoted fields, CRLF, a BOM and a missing last line end are read",
          "[data][csv]") {
  const auto t = parse_csv(
      "\xEF\xBB\xBF" "name,note,x\r\n"
      "\"Smith, J\",\"said \"\"hi\"\"\",1.5\r\n"
      "\r\n"  // a blank line is skipped
      "plain,\"two\nlines\",-2\r\n"
      "last,,3",
      "t.csv");
  REQUIRE(t.header == std::vector<std::string>{"name", "note", "x"});
  REQUIRE(t.rows() == 3);
  CHECK(t.at(0, 0) == "Smith, J");
  CHECK(t.at(0, 1) == "said \"hi\"");
  CHECK(t.at(0, 2) == "1.5");
  CHECK(t.at(1, 1) == "two\nlines");
  CHECK(t.at(2, 1).empty());
  CHECK(t.at(2, 2) == "3");
  // Lines of the file: the header is 1; the blank line 3 is skipped; the quoted
  // line end makes row 3 start on line 6.
  CHECK(t.lines == std::vector<int64_t>{2, 4, 6});
}

TEST_CASE("CSV: the views outlive a move of the table, short files included", "[data][csv]") {
  auto t = parse_csv("a\n1\n", "t.csv");  // shorter than std::string's inline buffer
  const auto moved = std::move(t);
  REQUIRE(moved.at(0, 0) == "1");
}

TEST_CASE("CSV: tab and semicolon delimiters; a trailing newline or several", "[data][csv]") {
  const auto tab = parse_csv("a\tb\n1\t2\n\n\n", "t.tsv", {'\t'});
  REQUIRE(tab.rows() == 1);
  REQUIRE(tab.at(0, 1) == "2");
  const auto semi = parse_csv("a;b\n\"1;5\";2", "t.csv", {';'});
  REQUIRE(semi.at(0, 0) == "1;5");
}

TEST_CASE("CSV: malformed tables name the file, line and column", "[data][csv]") {
  CHECK_THAT(error_of(""), Catch::Contains("t.csv: expected a header row and data rows, found an empty file"));
  CHECK_THAT(error_of("\n\n"), Catch::Contains("found an empty file"));
  CHECK_THAT(error_of("a,b\n"), Catch::Contains("t.csv: expected data rows after the header, found none"));
  CHECK_THAT(error_of("a,b\n1,2\n3\n"),
             Catch::Contains("t.csv: line 3: expected 2 fields (as the header has), found 1"));
  CHECK_THAT(error_of("a,b\n1,2,3\n"), Catch::Contains("line 2: expected 2 fields"));
  CHECK_THAT(error_of("a,b\n1,\"open\n2,3\n"),
             Catch::Contains("t.csv: line 2, column 2: the quote opened here is never closed"));
  CHECK_THAT(error_of("a,b\n1,x\"y\n"),
             Catch::Contains("t.csv: line 2, column 2: a quote inside an unquoted field"));
  CHECK_THAT(error_of("a,b\n\"1\"x,2\n"),
             Catch::Contains("line 2, column 1: expected a delimiter ',' or a line end after the "
                             "closing quote, found 'x'"));
  CHECK_THAT(error_of("a,,c\n1,2,3\n"),
             Catch::Contains("line 1, column 2: expected a column name in the header, found an empty one"));
  CHECK_THAT(error_of("a,b,a\n1,2,3\n"), Catch::Contains("column 3: the column name 'a' is repeated"));
  CHECK_THAT(error_of("a\n1\n", '"'), Catch::Contains("data.delimiter"));
  // Latin-1 text (its names and labels would go into JSON, which crashed the run with
  // json's "incomplete UTF-8 string"): refused by line and column, with the way out.
  CHECK_THAT(error_of("a,plat\n1,caf\xe9\n"),
             Catch::Contains("t.csv: invalid UTF-8 at byte 12 (line 2, column 6): bytes E9") &&
                 Catch::Contains("expected UTF-8: convert the table (iconv -f latin1 -t utf-8"));
  CHECK(parse_csv("\xEF\xBB\xBF" "a,plat\n1,caf\xC3\xA9\n", "t.csv").at(0, 1) == "caf\xC3\xA9");
}
