// Chooses, once per process, which build of the vectorised CPU kernels runs:
// kiln compiles every *_cpu_kernel.cpp for DEFAULT, AVX2 and AVX512 (on x86-64),
// as ATen does, and picks the best one the processor supports.
#pragma once
#include <string>

namespace kiln::ops {

enum class CpuCapability { kDefault = 0, kAvx2 = 1, kAvx512 = 2 };

/// The capability in use: the best the CPU and this build support, lowered by the
/// environment variable KILN_CPU_CAPABILITY=default|avx2|avx512 (like ATen's
/// ATEN_CPU_CAPABILITY). Example: if (cpu_capability() == CpuCapability::kAvx512) …
CpuCapability cpu_capability();
std::string to_string(CpuCapability c);

}  // namespace kiln::ops

// Declares a kernel built once per capability and `NAME_impl()`, which returns the
// build to call. SIG is the parenthesised parameter list.
#if defined(KILN_HAVE_CPU_AVX512)
#define KILN_CPU_KERNEL_AVX512(NAME, SIG) \
  namespace avx512 { void NAME SIG; }
#define KILN_CPU_PICK_AVX512(NAME) \
  if (c == ::kiln::ops::CpuCapability::kAvx512) return &avx512::NAME;
#else
#define KILN_CPU_KERNEL_AVX512(NAME, SIG)
#define KILN_CPU_PICK_AVX512(NAME)
#endif
#if defined(KILN_HAVE_CPU_AVX2)
#define KILN_CPU_KERNEL_AVX2(NAME, SIG) \
  namespace avx2 { void NAME SIG; }
#define KILN_CPU_PICK_AVX2(NAME) \
  if (c >= ::kiln::ops::CpuCapability::kAvx2) return &avx2::NAME;
#else
#define KILN_CPU_KERNEL_AVX2(NAME, SIG)
#define KILN_CPU_PICK_AVX2(NAME)
#endif

#define KILN_DECLARE_CPU_KERNEL(NAME, SIG)                     \
  namespace base { void NAME SIG; }                            \
  KILN_CPU_KERNEL_AVX2(NAME, SIG)                              \
  KILN_CPU_KERNEL_AVX512(NAME, SIG)                            \
  inline auto NAME##_impl() -> decltype(&base::NAME) {         \
    [[maybe_unused]] const auto c = ::kiln::ops::cpu_capability(); \
    KILN_CPU_PICK_AVX512(NAME)                                 \
    KILN_CPU_PICK_AVX2(NAME)                                   \
    return &base::NAME;                                        \
  }
