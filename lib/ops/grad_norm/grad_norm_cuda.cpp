// CUDA kernel of kiln::grad_norm as a registered Tensor function: builds the
// chunk table in pinned memory, copies it without waiting, and launches once
// (grad_norm_cuda.cu).
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "grad_norm_args.h"
#include "grad_norm_kernel.h"

namespace kiln::ops {
namespace {

at::Tensor grad_norm_cuda(at::TensorList tensors) {
  const auto a = grad_norm_args(tensors);
  const c10::cuda::CUDAGuard device_guard(a.tensors[0].device());
  auto out = at::empty({}, a.out_options);
  // table: (address, length) per chunk of at most kGradNormChunk elements.
  std::vector<int64_t> entries;
  for (const auto& t : a.tensors)
    for (int64_t start = 0; start < t.numel(); start += cuda::kGradNormChunk) {
      entries.push_back(reinterpret_cast<int64_t>(elem_ptr(t, start)));
      entries.push_back(std::min(cuda::kGradNormChunk, t.numel() - start));
    }
  const int64_t chunks = static_cast<int64_t>(entries.size()) / 2;
  if (chunks == 0) return out.zero_();
  auto host = at::empty({2 * chunks}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
  std::copy(entries.begin(), entries.end(), host.data_ptr<int64_t>());
  // From pinned memory the copy is asynchronous; the host allocator keeps the
  // buffer until the stream has read it.
  const auto table = host.to(a.tensors[0].device(), /*non_blocking=*/true);
  const int blocks = cuda::grad_norm_blocks(chunks);
  // `blocks` doubles and the counter (as one more double's room).
  auto workspace = at::empty({blocks + 1}, a.out_options.dtype(at::kDouble));
  cuda::grad_norm(a.dtype, table.const_data_ptr<int64_t>(), chunks, workspace.data_ptr(), blocks,
                  out.data_ptr(), a.dtype == DType::kDouble, c10::cuda::getCurrentCUDAStream());
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CUDA, m) { m.impl("grad_norm", grad_norm_cuda); }

}  // namespace kiln::ops
