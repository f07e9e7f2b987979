// What every kiln test shares: comparisons that report the worst element, the
// central-difference gradient check, and the visible skip of CUDA tests.
#pragma once
#include <ATen/ATen.h>
#include <catch2/catch.hpp>

#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace kiln::test {

/// ctest marks a test skipped when its output contains this (SKIP_REGULAR_EXPRESSION).
inline constexpr const char* kSkipMarker = "KILN_TEST_SKIPPED";

/// Reports the test as skipped (ctest reads the marker) and returns false, so a
/// test can `if (!condition) return kiln::test::skip("why");`.
bool skip(const std::string& why);

/// True when a CUDA device is present; otherwise prints the skip marker so ctest
/// reports the test as skipped, never as a silent pass.
bool cuda_available_or_skip(const std::string& why = "no CUDA device");

/// The torch wheel's virtual environment's Python (KILN_TEST_PYTHON, set by ctest), which
/// runs the real readers in interop tests, when it can `import <modules>` (scripts/setup
/// installs numpy and safetensors there); otherwise prints the skip marker and returns
/// nullopt. Example: const auto py = kiln::test::python_or_skip("torch, numpy"); if (!py) return;
std::optional<std::string> python_or_skip(const std::string& modules);

struct Closeness {
  bool ok = true;
  std::string report;  // worst element: index, actual, expected, error
};

/// Compares elementwise with |a−e| ≤ atol + rtol·|e|; on failure reports the worst element.
Closeness all_close(const at::Tensor& actual, const at::Tensor& expected, double rtol, double atol);

/// Whether `actual` (a floating dtype, any device) is within one unit in the last place
/// of its own dtype of `reference` (float64) at every element: the spacing of the
/// dtype's numbers at reference rounded to the dtype, away from zero. A correctly
/// rounded result is within half of one. `slack` (float64, broadcast to reference's
/// shape) adds an absolute allowance per element, for a value that cancels in a wider
/// type before it is rounded (its error is then the wider type's, not the dtype's).
/// Reports the worst element, its error in ulps and its allowance.
Closeness within_one_ulp(const at::Tensor& actual, const at::Tensor& reference,
                         const at::Tensor& slack = {});

/// Central differences in double: d f(x).sum()·w / dx for a fixed random weight w,
/// compared with autograd. Reports the worst element (index, analytic, numeric).
Closeness gradcheck(const std::function<at::Tensor(const at::Tensor&)>& f, const at::Tensor& x,
                    double eps = 1e-6, double rtol = 1e-5, double atol = 1e-6);

/// The floating dtypes every op supports.
inline const std::vector<at::ScalarType> kFloatingDtypes = {at::kFloat, at::kDouble, at::kHalf,
                                                            at::kBFloat16};

struct Tolerance {
  double rtol, atol;
};
/// How close a kernel in `dtype` must come to a reference computed in float64:
/// float64 1e-12, float32 1e-5, float16 2e-3, bfloat16 1.6e-2 (relative, and as absolute).
Tolerance tolerance_for(at::ScalarType dtype);

using TensorFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

/// Runs f on the CPU inputs and on CUDA copies of them and requires every output
/// to agree within `tol`, reporting the worst element. Call it after
/// cuda_available_or_skip(). Example: require_cuda_matches_cpu(f, {x, b}, tolerance_for(x.scalar_type()));
void require_cuda_matches_cpu(const TensorFn& f, const std::vector<at::Tensor>& cpu_inputs,
                              Tolerance tol);

/// The message of the kiln::InputError that f throws; a test failure when it throws
/// none. Example: CHECK_THAT(kiln::test::input_error_of([&] { read_npy(p); }), Contains("p.npy"));
std::string input_error_of(const std::function<void()>& f);

/// Runs this test binary again in a child process with `args` (a test case's name, for
/// one whose failure would poison this process, like a CUDA device-side assertion),
/// its standard output and error together in `output`; returns its exit status (the
/// exit code, or 128 + the signal that ended it).
int run_self(const std::vector<std::string>& args, std::string& output);

/// The warnings kiln logs while the object lives (log::set_warning_listener), the
/// listener removed when it goes, a failed check included.
/// Example: CapturedWarnings warned; load_data(o); REQUIRE(warned.messages().size() == 1);
class CapturedWarnings {
 public:
  CapturedWarnings();
  ~CapturedWarnings();
  CapturedWarnings(const CapturedWarnings&) = delete;
  CapturedWarnings& operator=(const CapturedWarnings&) = delete;
  const std::vector<std::string>& messages() const { return messages_; }

 private:
  std::vector<std::string> messages_;
};

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
