// The builds of a vectorised CPU kernel that this machine runs, for tests that call
// every build of a kernel directly (lib/ops/cpu_capability.h).
// Example: for (const auto& [name, fn] : KILN_CPU_BUILDS(relu_forward)) fn(…);
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "ops/cpu_capability.h"

namespace kiln::test {

template <typename Fn>
struct CpuBuild {
  std::string name;
  Fn fn;
  ops::CpuCapability needs;
};

/// The builds whose capability the processor has (and KILN_CPU_CAPABILITY allows).
template <typename Fn>
std::vector<std::pair<std::string, Fn>> runnable(const std::vector<CpuBuild<Fn>>& builds) {
  std::vector<std::pair<std::string, Fn>> out;
  for (const auto& b : builds)
    if (ops::cpu_capability() >= b.needs) out.emplace_back(b.name, b.fn);
  return out;
}

}  // namespace kiln::test

#if defined(KILN_HAVE_CPU_AVX2)
#define KILN_CPU_BUILD_AVX2(NAME) {"avx2", &::kiln::ops::cpu::avx2::NAME, ::kiln::ops::CpuCapability::kAvx2},
#else
#define KILN_CPU_BUILD_AVX2(NAME)
#endif
#if defined(KILN_HAVE_CPU_AVX512)
#define KILN_CPU_BUILD_AVX512(NAME) \
  {"avx512", &::kiln::ops::cpu::avx512::NAME, ::kiln::ops::CpuCapability::kAvx512},
#else
#define KILN_CPU_BUILD_AVX512(NAME)
#endif

/// Every build of the kernel NAME that runs here, as (name, function) pairs.
#define KILN_CPU_BUILDS(NAME)                                                                \
  ::kiln::test::runnable<decltype(&::kiln::ops::cpu::base::NAME)>(                           \
      {{"default", &::kiln::ops::cpu::base::NAME, ::kiln::ops::CpuCapability::kDefault},     \
       KILN_CPU_BUILD_AVX2(NAME) KILN_CPU_BUILD_AVX512(NAME)})
