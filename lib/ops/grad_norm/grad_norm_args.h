// The argument checks kiln::grad_norm's CPU and CUDA kernels share: a non-empty
// list of floating tensors of one dtype and device, made contiguous.
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

#include "../op_support.h"

namespace kiln::ops {

struct GradNormArgs {
  std::vector<at::Tensor> tensors;  // contiguous, same dtype and device
  DType dtype;
  at::TensorOptions out_options;  // float32 (float64 for float64 tensors), the tensors' device
};

inline GradNormArgs grad_norm_args(at::TensorList tensors) {
  constexpr const char* op = "kiln::grad_norm";
  TORCH_CHECK(!tensors.empty(), op, ": tensors: expected at least one tensor, got none");
  check_floating(op, "tensors[0]", tensors[0]);
  GradNormArgs a;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    TORCH_CHECK(t.defined(), op, ": tensors[", i, "]: expected a tensor, got an undefined one");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type() && t.device() == tensors[0].device(),
                op, ": tensors[", i, "]: expected ", tensors[0].scalar_type(), " on ",
                tensors[0].device(), " (as tensors[0]), got ", t.scalar_type(), " on ", t.device());
    a.tensors.push_back(t.contiguous());
  }
  a.dtype = kernel_dtype(tensors[0]);
  a.out_options = tensors[0].options().dtype(a.dtype == DType::kDouble ? at::kDouble : at::kFloat);
  return a;
}

}  // namespace kiln::ops
