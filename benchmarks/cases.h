// The registry of benchmark cases: benchmarks/ops/<op>.cpp says, for a size and
// tensor options, which kiln call to time against which ATen reference.
#pragma once
#include "bench_support.h"

namespace kiln::bench {

/// Makes the cases of one op for n elements of the given dtype and device.
using CaseFactory = std::function<std::vector<Case>(int64_t n, const at::TensorOptions& options)>;

std::vector<CaseFactory>& registry();

struct Register {
  explicit Register(CaseFactory f) { registry().push_back(std::move(f)); }
};

}  // namespace kiln::bench

/// KILN_BENCH_CASES(gelu) { return {{"gelu", "fwd", [=] {…}, [=] {…}}}; }
/// (inside, `n` is the element count and `options` the dtype and device)
#define KILN_BENCH_CASES(OP)                                                              \
  static std::vector<::kiln::bench::Case> OP##_cases(int64_t n,                           \
                                                     const at::TensorOptions& options);   \
  static const ::kiln::bench::Register OP##_registered(OP##_cases);                       \
  static std::vector<::kiln::bench::Case> OP##_cases(int64_t n, const at::TensorOptions& options)
