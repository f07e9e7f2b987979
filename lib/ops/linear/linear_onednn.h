// Which of libtorch's oneDNN paths kiln::linear can use on this CPU (linear_aten.cpp).
#pragma once
#include <string_view>

namespace kiln::ops {

/// Whether KILN_CPU_LINEAR=auto sends large float32 products to oneDNN on a CPU whose
/// vendor string (cpu_vendor()) is `vendor`: everywhere but on Intel's, where MKL runs
/// its own tuned kernels and beat oneDNN in the training step (on AMD's it runs a
/// generic path that oneDNN beats; docs/performance.md).
/// Example: linear_float32_onednn_by_default("AuthenticAMD") is true.
bool linear_float32_onednn_by_default(std::string_view vendor);

/// Whether this process sends large float32 CPU products to oneDNN: KILN_CPU_LINEAR=auto
/// where linear_float32_onednn_by_default(cpu_vendor()), or =onednn; each path also
/// needs libtorch to have it. Example: if (linear_float32_onednn()) …
bool linear_float32_onednn();

/// Whether libtorch's oneDNN matmul is usable here: libtorch has it and it passed its
/// check on this CPU (false with KILN_CPU_LINEAR=blas). Large float32 weight gradients
/// go through it where linear_float32_onednn() too; it also gates oneDNN's bf16 path.
/// Example: if (linear_onednn_matmul_available()) …
bool linear_onednn_matmul_available();

/// Whether this process computes bfloat16 and float16 CPU products as float32 ones
/// (operands cast up, one rounding of the float32 result): KILN_CPU_REDUCED_PRODUCTS=auto
/// on a CPU without fast bf16 products (cpu_bf16_matmul() kEmulated or
/// kAvx512Bf16OnePort), or =float32; =native never. Example: if (linear_reduced_in_float32()) …
bool linear_reduced_in_float32();

}  // namespace kiln::ops
