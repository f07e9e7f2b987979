// printable(): what a message quotes from a file cannot reach the terminal raw.
#include "support.h"
#include "util/error.h"

TEST_CASE("printable keeps UTF-8, newlines and tabs and escapes every other byte", "[util][error]") {
  using kiln::printable;
  REQUIRE(printable("plain text, ≤ 10 %, … and 🏖️\n\tok") == "plain text, ≤ 10 %, … and 🏖️\n\tok");
  REQUIRE(printable(std::string("a\x80z", 3)) == "a\\x80z");                // a lone continuation byte
  REQUIRE(printable(std::string("\x1b[2J", 4)) == "\\x1B[2J");               // a terminal escape
  REQUIRE(printable(std::string("\xc3", 1)) == "\\xC3");                     // a sequence cut short
  REQUIRE(printable(std::string("\xc0\xaf", 2)) == "\\xC0\\xAF");           // an overlong '/'
  REQUIRE(printable(std::string("\xed\xa0\x80", 3)) == "\\xED\\xA0\\x80");  // a surrogate
  REQUIRE(printable(std::string("x\0y", 3)) == "x\\x00y");
  REQUIRE(printable("\x7f") == "\\x7F");
}
