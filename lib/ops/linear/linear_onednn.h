// Which of libtorch's oneDNN paths kiln::linear can use on this CPU (linear_aten.cpp).
#pragma once

namespace kiln::ops {

/// Whether float32 weight gradients on the CPU go through oneDNN's matmul when large
/// enough: libtorch has it and it passed its check on this CPU (false with
/// KILN_CPU_LINEAR=blas). Example: if (linear_onednn_matmul_available()) …
bool linear_onednn_matmul_available();

}  // namespace kiln::ops
