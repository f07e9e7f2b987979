// CPU kernels of kiln::max_pool2_forward and kiln::max_pool2_backward: the checks, the
// layout, and the vectorised kernels of max_pool2_cpu_kernel.cpp over threads. The
// forward keeps one byte a window (which of its four won) where ATen's keeps an int64
// index, and the backward writes every element of dx once (the winner's gradient or a
// zero) where ATen's fills dx with zeros and then scatters.
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "../op_support.h"
#include "max_pool2_args.h"

namespace kiln::ops {
namespace {

// Units per task: about 16 K input values.
int64_t grain(const cpu::PoolShape& s) {
  const int64_t per = s.channels_last ? 2 * s.w * s.c : s.h * s.w;
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, per));
}

std::tuple<at::Tensor, at::Tensor> max_pool2_forward_cpu(const at::Tensor& x) {
  const bool cl = max_pool2_channels_last(x);
  const auto s = max_pool2_shape("kiln::max_pool2_forward", x, cl);
  const auto format = max_pool2_format(cl);
  const auto xc = x.contiguous(format);
  auto y = at::empty({s.n, s.c, s.oh(), s.ow()}, x.options().memory_format(format));
  auto code = at::empty({s.n, s.c, s.oh(), s.ow()}, x.options().dtype(at::kByte).memory_format(format));
  const auto kernel = cpu::max_pool2_forward_impl();
  const auto dt = kernel_dtype(xc);
  at::parallel_for(0, s.units(), grain(s), [&](int64_t begin, int64_t end) {
    kernel(dt, s, xc.const_data_ptr(), y.data_ptr(), code.data_ptr<uint8_t>(), begin, end);
  });
  return {std::move(y), std::move(code)};
}

at::Tensor max_pool2_backward_cpu(const at::Tensor& grad, const at::Tensor& code, at::IntArrayRef input_size,
                                  bool channels_last) {
  const auto s = max_pool2_backward_shape("kiln::max_pool2_backward", grad, code, input_size, channels_last);
  const auto format = max_pool2_format(channels_last);
  const auto gc = grad.contiguous(format), cc = code.contiguous(format);
  auto dx = at::empty(input_size, grad.options().memory_format(format));
  const auto kernel = cpu::max_pool2_backward_impl();
  const auto dt = kernel_dtype(gc);
  at::parallel_for(0, s.units(), grain(s), [&](int64_t begin, int64_t end) {
    kernel(dt, s, gc.const_data_ptr(), cc.const_data_ptr<uint8_t>(), dx.data_ptr(), begin, end);
  });
  return dx;
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("max_pool2_forward", max_pool2_forward_cpu);
  m.impl("max_pool2_backward", max_pool2_backward_cpu);
}

}  // namespace kiln::ops
