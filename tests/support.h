// What every kiln test shares: comparisons that report the worst element, the
// central-difference gradient check, and the visible skip of CUDA tests.
#pragma once
#include <ATen/ATen.h>
#include <catch2/catch.hpp>

#include <functional>
#include <sstream>
#include <string>

namespace kiln::test {

/// ctest marks a test skipped when its output contains this (SKIP_REGULAR_EXPRESSION).
inline constexpr const char* kSkipMarker = "KILN_TEST_SKIPPED";

/// True when a CUDA device is present; otherwise prints the skip marker so ctest
/// reports the test as skipped, never as a silent pass.
bool cuda_available_or_skip(const std::string& why = "no CUDA device");

struct Closeness {
  bool ok = true;
  std::string report;  // worst element: index, actual, expected, error
};

/// Compares elementwise with |a−e| ≤ atol + rtol·|e|; on failure reports the worst element.
Closeness all_close(const at::Tensor& actual, const at::Tensor& expected, double rtol, double atol);

/// Central differences in double: d f(x).sum()·w / dx for a fixed random weight w,
/// compared with autograd. Reports the worst element (index, analytic, numeric).
Closeness gradcheck(const std::function<at::Tensor(const at::Tensor&)>& f, const at::Tensor& x,
                    double eps = 1e-6, double rtol = 1e-5, double atol = 1e-6);

/// A fresh temporary directory, removed when the object goes.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace kiln::test

#define KILN_REQUIRE_CLOSE(actual, expected, rtol, atol)                      \
  do {                                                                      \
    const auto kiln_c = ::kiln::test::all_close((actual), (expected), rtol, atol); \
    INFO(kiln_c.report);                                                    \
    REQUIRE(kiln_c.ok);                                                     \
  } while (0)
