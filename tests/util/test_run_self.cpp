// kiln::test::run_self (tests/support.h): a named case of this test binary in a child
// process, for a case whose failure would poison this one (a CUDA device-side
// assertion, tests/ops/test_cross_entropy.cpp).
#include <catch2/catch.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "support.h"

// Hidden ("[.]"): run only when named, as run_self names them.
TEST_CASE("run_self child that passes", "[.][run_self]") { std::puts("the child ran"); }
TEST_CASE("run_self child that throws", "[.][run_self]") { throw std::runtime_error("the child threw"); }
TEST_CASE("run_self child that aborts", "[.][run_self]") { std::abort(); }

TEST_CASE("run_self runs one named case of this binary in a child process, its output and status",
          "[support]") {
  std::string output;
  REQUIRE(kiln::test::run_self({"run_self child that passes"}, output) == 0);
  REQUIRE(output.find("the child ran") != std::string::npos);
  REQUIRE(output.find("test cases: 1 | 1 passed") != std::string::npos);  // that case alone

  REQUIRE(kiln::test::run_self({"run_self child that throws"}, output) != 0);
  REQUIRE(output.find("the child threw") != std::string::npos);

  REQUIRE(kiln::test::run_self({"run_self child that aborts"}, output) == 128 + SIGABRT);
  REQUIRE(output.find("SIGABRT") != std::string::npos);
}
