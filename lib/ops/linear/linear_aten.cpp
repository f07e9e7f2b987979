// kiln::linear's checks and its ATen formulation: an existing library (MKL/oneDNN
// behind at::addmm on CPU, cuBLAS on CUDA) beats a hand-written kernel, so this is
// the CPU kernel itself and CUDA's path where cuBLASLt's fused epilogue does not apply.
#include "linear_aten.h"

#include <ATen/ops/addmm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/sum.h>

#include "../gelu/gelu_kernel.h"
#include "../op_support.h"

namespace kiln::ops::linear {
namespace {

// `t` has the dtype and device of x (shapes are checked by the caller, who knows them).
void check_dtype_device(std::string_view op, std::string_view name, const at::Tensor& t,
                        const at::Tensor& x) {
  TORCH_CHECK(t.scalar_type() == x.scalar_type(), op, ": ", name, ": expected dtype ",
              x.scalar_type(), " (the dtype of x), got ", t.scalar_type());
  TORCH_CHECK(t.device() == x.device(), op, ": ", name, ": expected device ", x.device(),
              " (the device of x), got ", t.device());
}

void check_x_w(std::string_view op, const at::Tensor& x, const at::Tensor& w) {
  check_floating(op, "x", x);
  TORCH_CHECK(x.dim() == 2, op, ": x: expected a 2-D tensor (B, K), got shape ", x.sizes());
  TORCH_CHECK(w.defined(), op, ": w: expected a tensor, got an undefined one");
  TORCH_CHECK(w.dim() == 2 && w.size(1) == x.size(1), op, ": w: expected shape (N, K) with K = ",
              x.size(1), " (x.size(1)), got ", w.sizes());
  check_dtype_device(op, "w", w, x);
}

}  // namespace

void check_forward(std::string_view op, const at::Tensor& x, const at::Tensor& w,
                   const std::optional<at::Tensor>& b) {
  check_x_w(op, x, w);
  if (b && b->defined()) {
    TORCH_CHECK(b->dim() == 1 && b->size(0) == w.size(0), op, ": b: expected shape (N) with N = ",
                w.size(0), " (w.size(0)), got ", b->sizes());
    check_dtype_device(op, "b", *b, x);
  }
}

void check_backward(std::string_view op, const at::Tensor& grad, const at::Tensor& x,
                    const at::Tensor& w) {
  check_x_w(op, x, w);
  TORCH_CHECK(grad.defined(), op, ": grad: expected a tensor, got an undefined one");
  TORCH_CHECK(grad.dim() == 2 && grad.size(0) == x.size(0) && grad.size(1) == w.size(0), op,
              ": grad: expected shape (B, N) = [", x.size(0), ", ", w.size(0),
              "] (x.size(0), w.size(0)), got ", grad.sizes());
  check_dtype_device(op, "grad", grad, x);
}

// z: (B, N) = x: (B, K) · wᵀ: (K, N) + b: (N) broadcast over rows.
// The output goes on huge pages when it is large (cpu_memory.h), written by the
// library's GEMM in place.
at::Tensor forward_aten(const at::Tensor& x, const at::Tensor& w,
                        const std::optional<at::Tensor>& b) {
  auto z = at::empty({x.size(0), w.size(0)}, x.options());
  advise_huge_pages(z);
  if (b && b->defined()) return at::addmm_out(z, *b, x, w.t());
  return at::mm_out(z, x, w.t());
}

// out = gelu_tanh(z) (out may be z): on CPU kiln's own gelu kernel (about 3× at::gelu,
// docs/ops.md), elsewhere at::gelu.
void gelu_into(const at::Tensor& z, at::Tensor& out) {
  if (!z.is_cpu()) {
    at::gelu_out(out, z, "tanh");
    return;
  }
  cpu_unary_into(z, out, cpu::gelu_forward_impl());
}

std::tuple<at::Tensor, at::Tensor> gelu_forward_aten(const at::Tensor& x, const at::Tensor& w,
                                                     const std::optional<at::Tensor>& b) {
  auto z = forward_aten(x, w, b);
  auto y = output_like(z);
  gelu_into(z, y);
  return {std::move(y), std::move(z)};
}

at::Tensor gelu_aten(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b) {
  auto z = forward_aten(x, w, b);
  gelu_into(z, z);  // z is ours and not kept: no second (B, N) buffer
  return z;
}

// dx: (B, K) = grad: (B, N) · w: (N, K); dw: (N, K) = gradᵀ · x; db: (N) = Σ_rows grad.
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_aten(const at::Tensor& grad,
                                                             const at::Tensor& x,
                                                             const at::Tensor& w,
                                                             std::array<bool, 3> output_mask) {
  at::Tensor dx, dw, db;
  if (output_mask[0]) dx = output_like(x), at::mm_out(dx, grad, w);
  if (output_mask[1]) dw = output_like(w), at::mm_out(dw, grad.t(), x);
  if (output_mask[2]) db = at::sum(grad, 0);
  return {std::move(dx), std::move(dw), std::move(db)};
}

}  // namespace kiln::ops::linear
