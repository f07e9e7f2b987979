// The CUDA counterparts of cpu_unary/cpu_binary (op_support.h): check, guard the
// device, make contiguous, allocate, and launch on the current stream.
#pragma once
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "op_support.h"

namespace kiln::ops {

/// launch(dtype, x, out, n, stream). Example: return cuda_unary("kiln::relu", "x", x, cuda::relu_forward);
template <typename Launch>
at::Tensor cuda_unary(std::string_view op, std::string_view name, const at::Tensor& x, Launch launch) {
  auto e = elementwise(op, name, x);
  const c10::cuda::CUDAGuard device_guard(x.device());
  if (e.x.numel() > 0)
    launch(kernel_dtype(e.x), e.x.const_data_ptr(), e.out.data_ptr(), e.x.numel(),
           c10::cuda::getCurrentCUDAStream());
  return e.out;
}

/// launch(dtype, a, b, out, n, stream), the output laid out like `from`'s input.
template <typename Launch>
at::Tensor cuda_binary(std::string_view op, std::string_view a_name, const at::Tensor& a,
                       std::string_view b_name, const at::Tensor& b, Launch launch,
                       LayoutFrom from = LayoutFrom::kFirst) {
  auto e = elementwise(op, a_name, a, b_name, b, from);
  const c10::cuda::CUDAGuard device_guard(a.device());
  if (e.a.numel() > 0)
    launch(kernel_dtype(e.a), e.a.const_data_ptr(), e.b.const_data_ptr(), e.out.data_ptr(),
           e.a.numel(), c10::cuda::getCurrentCUDAStream());
  return e.out;
}

}  // namespace kiln::ops
