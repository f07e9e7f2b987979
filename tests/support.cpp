// Shared test helpers (tests/support.h).
#include "support.h"

#include "util/error.h"
#include "util/files.h"
#include "util/log.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <sys/wait.h>
#include <unistd.h>

namespace kiln::test {

bool skip(const std::string& why) {
  std::cout << kSkipMarker << ": " << why << std::endl;
  WARN(kSkipMarker << ": " << why);
  return false;
}

bool cuda_available_or_skip(const std::string& why) {
  return torch::cuda::is_available() || skip(why);
}

std::string input_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kiln::InputError& e) {
    return e.what();
  }
  FAIL("expected a kiln::InputError, got none");
  return "";
}

std::optional<std::string> python_or_skip(const std::string& modules) {
  const char* py = std::getenv("KILN_TEST_PYTHON");
  if (!py || !std::filesystem::exists(py)) {
    skip("no torch venv python (KILN_TEST_PYTHON is set by ctest)");
    return std::nullopt;
  }
  const std::string probe = std::string(py) + " -c 'import " + modules + "' 2>/dev/null";
  if (std::system(probe.c_str()) != 0) {
    skip("the torch venv's python cannot import " + modules + " (scripts/setup installs them)");
    return std::nullopt;
  }
  return std::string(py);
}

Closeness all_close(const at::Tensor& actual, const at::Tensor& expected, double rtol,
                    double atol) {
  Closeness c;
  if (actual.sizes() != expected.sizes()) {
    std::ostringstream s;
    s << "shape " << actual.sizes() << " != expected " << expected.sizes();
    return {false, s.str()};
  }
  const auto a = actual.detach().to(at::kCPU, at::kDouble).reshape(-1);
  const auto e = expected.detach().to(at::kCPU, at::kDouble).reshape(-1);
  if (a.numel() == 0) return c;
  const auto err = (a - e).abs().masked_fill(a == e, 0.0);  // inf == inf is no error
  const auto tol = atol + rtol * e.abs().masked_fill(e.isinf(), 0.0);
  // NaN in the same place counts as equal; NaN on one side is the worst error.
  const auto both_nan = a.isnan() & e.isnan();
  auto excess = (err - tol).masked_fill(both_nan, -1.0).nan_to_num(INFINITY);
  const int64_t worst = excess.argmax().item<int64_t>();
  std::ostringstream s;
  s << "worst element [" << worst << "] of " << a.numel() << ": actual "
    << a[worst].item<double>() << ", expected " << e[worst].item<double>() << ", |error| "
    << err[worst].item<double>() << ", tolerance " << tol[worst].item<double>();
  c.ok = excess[worst].item<double>() <= 0.0;
  c.report = s.str();
  return c;
}

Closeness within_one_ulp(const at::Tensor& actual, const at::Tensor& reference, const at::Tensor& slack) {
  if (actual.sizes() != reference.sizes()) return all_close(actual, reference, 0, 0);  // its shape report
  const auto a = actual.detach().to(at::kCPU, at::kDouble).reshape(-1);
  const auto r = reference.detach().to(at::kCPU, at::kDouble).reshape(-1);
  if (a.numel() == 0) return {};
  const auto rounded = r.to(actual.scalar_type());
  const auto away = at::where(rounded.signbit(), -INFINITY, INFINITY).to(rounded.scalar_type());
  const auto ulp = (at::nextafter(rounded, away) - rounded).abs().to(at::kDouble);
  const auto allowed = slack.defined()
                           ? ulp + slack.detach().to(at::kCPU, at::kDouble).expand(reference.sizes()).reshape(-1)
                           : ulp;
  const auto err = (a - r).abs();
  const auto excess = (err / allowed).nan_to_num(INFINITY);  // NaN on either side: the worst
  const int64_t worst = excess.argmax().item<int64_t>();
  std::ostringstream s;
  s << "worst element [" << worst << "] of " << a.numel() << ": actual " << a[worst].item<double>()
    << ", float64 reference " << r[worst].item<double>() << ", error "
    << (err[worst] / ulp[worst]).item<double>() << " ulp of " << actual.scalar_type();
  if (slack.defined()) s << " (allowed 1 ulp + " << (allowed[worst] - ulp[worst]).item<double>() << ")";
  return {excess[worst].item<double>() <= 1.0, s.str()};
}

Closeness gradcheck(const std::function<at::Tensor(const at::Tensor&)>& f, const at::Tensor& x0,
                    double eps, double rtol, double atol) {
  const auto x = x0.detach().to(at::kDouble).clone().requires_grad_(true);
  const auto w = at::randn_like(f(x).detach());  // a random projection of the output
  (f(x) * w).sum().backward();
  const auto analytic = x.grad().detach().reshape(-1).clone();
  auto numeric = at::empty_like(analytic);
  // Grad mode stays on: f may itself differentiate (double-backward checks).
  auto flat = x.detach().reshape(-1);
  for (int64_t i = 0; i < flat.numel(); ++i) {
    const double v = flat[i].item<double>();
    flat[i] = v + eps;
    const double plus = (f(x.detach()).detach() * w).sum().item<double>();
    flat[i] = v - eps;
    const double minus = (f(x.detach()).detach() * w).sum().item<double>();
    flat[i] = v;
    numeric[i] = (plus - minus) / (2 * eps);
  }
  auto c = all_close(analytic, numeric, rtol, atol);
  c.report = "gradient (actual = analytic, expected = numeric): " + c.report;
  return c;
}

Tolerance tolerance_for(at::ScalarType dtype) {
  switch (dtype) {
    case at::kDouble: return {1e-12, 1e-12};
    case at::kHalf: return {2e-3, 2e-3};
    case at::kBFloat16: return {1.6e-2, 1.6e-2};
    default: return {1e-5, 1e-5};
  }
}

void require_cuda_matches_cpu(const TensorFn& f, const std::vector<at::Tensor>& cpu_inputs,
                              Tolerance tol) {
  std::vector<at::Tensor> cuda_inputs;
  for (const auto& t : cpu_inputs) cuda_inputs.push_back(t.defined() ? t.cuda() : t);
  const auto expected = f(cpu_inputs);
  const auto actual = f(cuda_inputs);
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    INFO("output " << i << " (CUDA = actual, CPU = expected)");
    REQUIRE(actual[i].is_cuda());
    KILN_REQUIRE_CLOSE(actual[i].cpu(), expected[i], tol.rtol, tol.atol);
  }
}

int run_self(const std::vector<std::string>& args, std::string& output) {
  std::string command = "'/proc/" + std::to_string(getpid()) + "/exe'";
  for (const auto& a : args) {
    command += " '";
    for (const char c : a) command += c == '\'' ? std::string("'\\''") : std::string(1, c);
    command += "'";
  }
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  output.clear();
  std::array<char, 4096> buf{};
  while (const size_t n = fread(buf.data(), 1, buf.size(), pipe)) output.append(buf.data(), n);
  const int status = pclose(pipe);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 255;
}

CapturedWarnings::CapturedWarnings() {
  log::set_warning_listener([this](log::Level, std::string_view m) { messages_.emplace_back(m); });
}

CapturedWarnings::~CapturedWarnings() { log::set_warning_listener({}); }

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "kiln-test-XXXXXX").string();
  path_ = mkdtemp(tmpl.data());
}

TempDir::~TempDir() {
  std::error_code ec;
  kiln::files::remove_tree(path_, ec);
}

}  // namespace kiln::test
