// Detects the CPU's vector capability once and honours KILN_CPU_CAPABILITY.
#include "cpu_capability.h"
#include "cpu_bf16.h"

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace kiln::ops {
namespace {

CpuCapability detect() {
  CpuCapability best = CpuCapability::kDefault;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
#if defined(KILN_HAVE_CPU_AVX2)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = CpuCapability::kAvx2;
#endif
#if defined(KILN_HAVE_CPU_AVX512)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    best = CpuCapability::kAvx512;
#endif
#endif
  // A user may lower the capability (never raise it past what the CPU has).
  if (const char* env = std::getenv("KILN_CPU_CAPABILITY")) {
    CpuCapability want = best;
    if (!std::strcmp(env, "default")) want = CpuCapability::kDefault;
    else if (!std::strcmp(env, "avx2")) want = CpuCapability::kAvx2;
    else if (!std::strcmp(env, "avx512")) want = CpuCapability::kAvx512;
    if (want < best) best = want;
  }
  return best;
}

}  // namespace

CpuCapability cpu_capability() {
  static const CpuCapability c = detect();
  return c;
}

std::string to_string(CpuCapability c) {
  switch (c) {
    case CpuCapability::kAvx512: return "avx512";
    case CpuCapability::kAvx2: return "avx2";
    default: return "default";
  }
}

CpuBf16Matmul cpu_bf16_matmul() {
#if defined(__x86_64__) || defined(__i386__)
  static const CpuBf16Matmul kind = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_max(0, nullptr) < 7) return CpuBf16Matmul::kEmulated;
    __cpuid_count(7, 0, a, b, c, d);
    const bool amx_bf16 = (d >> 22) & 1;  // CPUID.(7,0):EDX[22]
    __cpuid_count(7, 1, a, b, c, d);
    const bool avx512_bf16 = (a >> 5) & 1;  // CPUID.(7,1):EAX[5]
    if (amx_bf16) return CpuBf16Matmul::kMatrixUnits;
    if (!avx512_bf16) return CpuBf16Matmul::kEmulated;
    // The vendor tells the two AVX512-BF16 designs apart.
    return cpu_vendor() == "AuthenticAMD" ? CpuBf16Matmul::kAvx512Bf16
                                          : CpuBf16Matmul::kAvx512Bf16OnePort;
  }();
  return kind;
#elif defined(__aarch64__)
  return CpuBf16Matmul::kMatrixUnits;  // ARMv8.6 BF16 is common there; no warning without a reliable probe
#else
  return CpuBf16Matmul::kEmulated;
#endif
}

std::string cpu_vendor() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, id[4] = {};
  if (__get_cpuid_max(0, nullptr) == 0) return {};
  __cpuid(0, a, id[0], id[2], id[1]);  // EBX, EDX, ECX: the string's three parts in order
  return std::string(reinterpret_cast<const char*>(id), 12);
#else
  return {};
#endif
}

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_max(0, nullptr) < 7) return false;
    __cpuid_count(7, 1, a, b, c, d);
    return ((a >> 5) & 1) != 0;  // CPUID.(7,1):EAX[5]
  }();
  return has && cpu_capability() == CpuCapability::kAvx512;
#else
  return false;
#endif
}

}  // namespace kiln::ops
