// Autograd and autocast for kiln::linear, linear_gelu and linear_relu: Functions that
// save x and w (and the pre-activation z for linear_gelu, the output for linear_relu)
// and call the linear_backward op, itself differentiable (create_graph works); under
// autocast they run in the lower precision, as torch's own linear does.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "../autocast.h"
#include "../autograd_support.h"
#include "../ops.h"

namespace kiln::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using OptTensor = std::optional<at::Tensor>;

bool defined(const OptTensor& b) { return b && b->defined(); }

// (dx, dw, db) of z = x·wᵀ + b from dz and the saved x, w, each only where autograd
// needs it (PyTorch's own linear skips them too): a first layer fed with data gets no
// dx, a frozen weight no dw. The Function's inputs are (x, w, b); b is an input edge
// only when it is there.
variable_list linear_grads(AutogradContext* ctx, const at::Tensor& dz) {
  const auto saved = ctx->get_saved_variables();
  const bool has_bias = ctx->saved_data["has_bias"].toBool();
  const std::array<bool, 3> mask = {ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                    has_bias && ctx->needs_input_grad(2)};
  auto [dx, dw, db] = kiln::ops::linear_backward(dz, saved[0], saved[1], mask);
  return {dx, dw, db};
}

// (dx, dw, db) = (g·w, gᵀ·x, Σ_rows g) is bilinear in g and (x, w). For incoming
// (ggx, ggw, ggb): d/dg = ggx·wᵀ + x·ggwᵀ + ggb = linear(ggx, w, ggb) + linear(x, ggw),
// d/dx = g·ggw and d/dw = gᵀ·ggx, which is linear_backward(g, ggx, ggw).
// The Function returns only the gradients output_mask asks for (autograd wraps
// defined tensors only); backward puts the incoming ones back in their places.
class LinearBackwardFunction : public torch::autograd::Function<LinearBackwardFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& grad, const at::Tensor& x,
                               const at::Tensor& w, std::array<bool, 3> output_mask) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({grad, x, w});
    auto [dx, dw, db] = kiln::ops::linear_backward(grad, x, w, output_mask);
    variable_list out;
    for (auto* t : {&dx, &dw, &db})
      if (t->defined()) out.push_back(std::move(*t));
    ctx->saved_data["mask"] = c10::List<bool>({output_mask[0], output_mask[1], output_mask[2]});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list incoming) {
    const auto saved = ctx->get_saved_variables();
    const auto &grad = saved[0], &x = saved[1], &w = saved[2];
    const auto mask = ctx->saved_data["mask"].toBoolList();
    std::array<at::Tensor, 3> gg;  // incoming gradients of (dx, dw, db)
    for (size_t i = 0, k = 0; i < 3; ++i)
      if (mask[i]) gg[i] = incoming[k++];
    const auto ggx = gg[0].defined() ? gg[0] : at::zeros_like(x);
    const auto ggw = gg[1].defined() ? gg[1] : at::zeros_like(w);
    const OptTensor ggb = gg[2].defined() ? OptTensor(gg[2]) : std::nullopt;
    at::Tensor d_grad;
    if (ctx->needs_input_grad(0))
      d_grad = kiln::ops::linear(ggx, w, ggb) + kiln::ops::linear(x, ggw, std::nullopt);
    const auto d = kiln::ops::linear_backward(
        grad, ggx, ggw, {ctx->needs_input_grad(1), ctx->needs_input_grad(2), false});
    return {d_grad, std::get<0>(d), std::get<1>(d), at::Tensor()};
  }
};

class LinearFunction : public torch::autograd::Function<LinearFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const OptTensor& b) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->saved_data["has_bias"] = defined(b);
    ctx->save_for_backward({x, w});
    return kiln::ops::linear(x, w, b);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    return linear_grads(ctx, grad_outputs[0]);
  }
};

// Whether linear_gelu's backward takes dz and db from one pass of bias_gelu_backward
// with a zero bias (gelu'(z + 0)·grad and its column sums) instead of gelu_backward and
// then linear_backward's sum over dz's rows, which reads dz once more: wherever that op
// has a kernel for z's device (KILN_ONLY_OPS may leave it out; an accelerator backend
// may run it through a fallback). On the CPU it was 1.08x (bfloat16) and 1.76x
// (float32) the pair at the character GPT's first MLP layer, 4096 × 768 (docs/ops.md);
// on CUDA it is the same op's kernel, not yet timed on a GPU.
bool bias_grad_in_gelu_pass(const at::Tensor& z) {
  static const auto op = c10::Dispatcher::singleton().findOp({"kiln::bias_gelu_backward", ""});
  return op.has_value() && op->hasComputedKernelForDispatchKey(c10::legacyExtractDispatchKey(z.key_set()));
}

// y = gelu(z), z = x·wᵀ + b: dz = gelu'(z)·grad, then the linear gradients.
class LinearGeluFunction : public torch::autograd::Function<LinearGeluFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const OptTensor& b) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [y, z] = kiln::ops::linear_gelu_forward(x, w, b);
    ctx->saved_data["has_bias"] = defined(b);
    ctx->save_for_backward({x, w, z, defined(b) ? *b : at::Tensor()});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    // The saved z has no graph (it was made below autograd); with create_graph the
    // gradient must also flow through z into x, w and b, so z is recomputed from them.
    const auto z = at::GradMode::is_enabled()
                       ? kiln::ops::linear(saved[0], saved[1],
                                           saved[3].defined() ? OptTensor(saved[3]) : std::nullopt)
                       : saved[2];
    if (!at::GradMode::is_enabled() && saved[3].defined() && ctx->needs_input_grad(2) &&
        bias_grad_in_gelu_pass(z)) {
      auto [dz, db] = kiln::ops::bias_gelu_backward(grad_outputs[0], z, at::zeros({z.size(-1)}, z.options()));
      auto [dx, dw, none] = kiln::ops::linear_backward(
          dz, saved[0], saved[1], {ctx->needs_input_grad(0), ctx->needs_input_grad(1), false});
      return {dx, dw, db};
    }
    return linear_grads(ctx, kiln::ops::gelu_backward(grad_outputs[0], z));
  }
};

// y = relu(z), z = x·wᵀ + b: dz = grad·1[y > 0], the mask read from the saved output
// (y > 0 exactly where z > 0), then the linear gradients. One node where relu(linear)
// makes two, and no z kept. relu_backward is differentiable in grad and its derivative
// in y is zero almost everywhere, so create_graph needs nothing recomputed.
class LinearReluFunction : public torch::autograd::Function<LinearReluFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const OptTensor& b) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto y = kiln::ops::linear_relu(x, w, b);
    ctx->saved_data["has_bias"] = defined(b);
    ctx->save_for_backward({x, w, y});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto y = ctx->get_saved_variables()[2];
    return linear_grads(ctx, kiln::ops::relu_backward(grad_outputs[0], y));
  }
};

at::Tensor linear_autograd(const at::Tensor& x, const at::Tensor& w, const OptTensor& b) {
  return record_or_call<LinearFunction>(&kiln::ops::linear, x, w, b);
}

at::Tensor linear_gelu_autograd(const at::Tensor& x, const at::Tensor& w, const OptTensor& b) {
  return record_or_call<LinearGeluFunction>(&kiln::ops::linear_gelu, x, w, b);
}

at::Tensor linear_relu_autograd(const at::Tensor& x, const at::Tensor& w, const OptTensor& b) {
  return record_or_call<LinearReluFunction>(&kiln::ops::linear_relu, x, w, b);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_backward_autograd(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& w,
    std::array<bool, 3> output_mask) {
  if (!records(grad, x, w)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return kiln::ops::linear_backward(grad, x, w, output_mask);
  }
  const auto out = LinearBackwardFunction::apply(grad, x, w, output_mask);
  std::array<at::Tensor, 3> d;
  for (size_t i = 0, k = 0; i < 3; ++i)
    if (output_mask[i]) d[i] = out[k++];
  return {d[0], d[1], d[2]};
}

// Autocast policy "lower precision": x, w and b are cast to autocast's dtype for
// device D (weights through its cast cache), then the op runs below autocast.
template <c10::DeviceType D, at::Tensor (*Fn)(const at::Tensor&, const at::Tensor&, const OptTensor&)>
at::Tensor lower_precision(const at::Tensor& x, const at::Tensor& w, const OptTensor& b) {
  autocast::Below<D> below;
  const auto dtype = autocast::lower_dtype<D>();
  return Fn(autocast::cast<D>(x, dtype), autocast::cast<D>(w, dtype), autocast::cast<D>(b, dtype));
}

template <c10::DeviceType D>
at::Tensor linear_autocast(const at::Tensor& x, const at::Tensor& w, const OptTensor& b) {
  return lower_precision<D, &kiln::ops::linear>(x, w, b);
}
template <c10::DeviceType D>
at::Tensor linear_gelu_autocast(const at::Tensor& x, const at::Tensor& w, const OptTensor& b) {
  return lower_precision<D, &kiln::ops::linear_gelu>(x, w, b);
}
template <c10::DeviceType D>
at::Tensor linear_relu_autocast(const at::Tensor& x, const at::Tensor& w, const OptTensor& b) {
  return lower_precision<D, &kiln::ops::linear_relu>(x, w, b);
}

}  // namespace

bool linear_gelu_bias_grad_in_one_pass(const at::Tensor& z) { return bias_grad_in_gelu_pass(z); }

TORCH_LIBRARY_IMPL(kiln, Autograd, m) {
  m.impl("linear", linear_autograd);
  m.impl("linear_gelu", linear_gelu_autograd);
  m.impl("linear_relu", linear_relu_autograd);
  m.impl("linear_backward", linear_backward_autograd);
}

KILN_AUTOCAST_KERNELS("linear", linear_autocast)
KILN_AUTOCAST_KERNELS("linear_gelu", linear_gelu_autocast)
KILN_AUTOCAST_KERNELS("linear_relu", linear_relu_autocast)

}  // namespace kiln::ops
