// How this CPU multiplies bfloat16 matrices, read from CPUID: what a bf16 autocast
// run on it can expect (docs/performance.md measures each kind but AMX's), and whose
// CPU it is (the float32 products' library follows it). Kept out of cpu_capability.h,
// which every vectorised kernel includes.
#pragma once
#include <string>

namespace kiln::ops {

enum class CpuBf16Matmul {
  kEmulated,           // neither AVX512-BF16 nor AMX-BF16: oneDNN emulates bf16, ~50x fp32's time
  kAvx512Bf16OnePort,  // Intel's AVX512-BF16 without AMX: vdpbf16ps on one port where two do
                       // FMAs, so no more bf16 FLOPs than fp32's; ~half its speed measured
  kAvx512Bf16,         // AMD's AVX512-BF16 (Zen 4, Zen 5): vdpbf16ps at the FMA's rate, twice
                       // fp32's FLOPs a cycle; GEMMs 2.0-2.7x fp32's measured on a Zen 4
  kMatrixUnits,        // AMX-BF16 tiles: several times fp32's FLOPs (assumed on aarch64, unprobed)
};

/// The kind, once per process. Example: if (cpu_bf16_matmul() == CpuBf16Matmul::kMatrixUnits) …
CpuBf16Matmul cpu_bf16_matmul();

/// Whether kiln's own bfloat16 kernels may use AVX512-BF16's vdpbf16ps: the CPU has it
/// and the AVX-512 kernel build is the one in use (KILN_CPU_CAPABILITY can lower it).
/// Example: kernel(…, cpu_has_avx512_bf16());
bool cpu_has_avx512_bf16();

/// The CPU's vendor string, CPUID leaf 0's twelve characters ("GenuineIntel",
/// "AuthenticAMD", …); empty where there is no CPUID (not x86). Example:
/// if (cpu_vendor() == "GenuineIntel") …
std::string cpu_vendor();

}  // namespace kiln::ops
