// The console's formatting: durations from milliseconds to hours.
#include <catch2/catch.hpp>

#include <limits>

#include "console.h"

TEST_CASE("durations read in ms under a second, then s, m and h", "[app][console]") {
  using kiln::app::format_duration;
  CHECK(format_duration(0.0) == "0ms");
  CHECK(format_duration(0.017) == "17ms");
  CHECK(format_duration(0.9994) == "999ms");
  CHECK(format_duration(0.9996) == "1.0s");
  CHECK(format_duration(12.34) == "12.3s");
  CHECK(format_duration(75) == "1m15s");
  CHECK(format_duration(3 * 3600 + 7 * 60) == "3h07m");
  CHECK(format_duration(-1) == "?");
  CHECK(format_duration(std::numeric_limits<double>::infinity()) == "?");
}
