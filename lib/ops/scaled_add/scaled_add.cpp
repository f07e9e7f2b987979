// Autograd and autocast for kiln::scaled_add: a torch::autograd::Function that
// saves nothing (the gradients depend only on alpha) and calls the
// scaled_add_backward op, itself differentiable; under autocast, inputs of two
// floating dtypes are both cast to their promoted dtype, as ATen's add does.
#include <ATen/ops/result_type.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "../autocast.h"
#include "../autograd_support.h"
#include "../ops.h"
#include "scaled_add_args.h"

namespace kiln::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// scaled_add_backward(g) = (alpha·g, g) is linear in g: for incoming gradients
// (gx, gy) its gradient is alpha·gx + gy, which is scaled_add again (in g's dtype: a
// mixed pair's gx is of the half type x_dtype).
class ScaledAddBackwardFunction : public torch::autograd::Function<ScaledAddBackwardFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& grad, double alpha,
                               std::optional<at::ScalarType> x_dtype) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->saved_data["alpha"] = alpha;
    ctx->saved_data["dtype"] = grad.scalar_type();
    auto [gx, gy] = kiln::ops::scaled_add_backward(grad, alpha, x_dtype);
    return {gx, gy};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const double alpha = ctx->saved_data["alpha"].toDouble();
    const auto dtype = ctx->saved_data["dtype"].toScalarType();
    const auto& ggx = grad_outputs[0];
    const auto& ggy = grad_outputs[1];
    at::Tensor d_grad;
    if (ggx.defined() && ggy.defined()) d_grad = kiln::ops::scaled_add(ggx, ggy, alpha);
    else if (ggx.defined()) d_grad = alpha * ggx;
    else d_grad = ggy;
    return {d_grad.to(dtype), at::Tensor(), at::Tensor()};
  }
};

// Saves x's and y's dtypes: for a mixed pair each gradient comes back in its input's.
class ScaledAddFunction : public torch::autograd::Function<ScaledAddFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& y,
                            double alpha) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->saved_data["alpha"] = alpha;
    ctx->saved_data["x_dtype"] = x.scalar_type();
    ctx->saved_data["y_dtype"] = y.scalar_type();
    return kiln::ops::scaled_add(x, y, alpha);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const double alpha = ctx->saved_data["alpha"].toDouble();
    const auto x_dtype = ctx->saved_data["x_dtype"].toScalarType();
    const auto y_dtype = ctx->saved_data["y_dtype"].toScalarType();
    const auto& grad = grad_outputs[0];
    auto [gx, gy] = kiln::ops::scaled_add_backward(
        grad, alpha, x_dtype == grad.scalar_type() ? std::nullopt : std::optional(x_dtype));
    return {gx, gy.to(y_dtype), at::Tensor()};
  }
};

at::Tensor scaled_add_autograd(const at::Tensor& x, const at::Tensor& y, double alpha) {
  return record_or_call<ScaledAddFunction>(&kiln::ops::scaled_add, x, y, alpha);
}

std::tuple<at::Tensor, at::Tensor> scaled_add_backward_autograd(const at::Tensor& grad, double alpha,
                                                                std::optional<at::ScalarType> x_dtype) {
  if (!records(grad)) {
    at::AutoDispatchBelowADInplaceOrView below;
    return kiln::ops::scaled_add_backward(grad, alpha, x_dtype);
  }
  auto g = ScaledAddBackwardFunction::apply(grad, alpha, x_dtype);
  return {g[0], g[1]};
}

// Autocast policy "promote": two floating dtypes (say float64 x and float32 y) both
// go to at::result_type(x, y); one dtype runs as it is, and so does float32 with a
// half type, which the kernels take as it is (float32 out, no float32 copy of the
// half one: autocast's residual stream). Outside autocast other mismatches stay an
// error of the backend kernels.
template <c10::DeviceType D>
at::Tensor scaled_add_autocast(const at::Tensor& x, const at::Tensor& y, double alpha) {
  const autocast::Below<D> below;
  if (!x.defined() || !y.defined() || x.scalar_type() == y.scalar_type() || is_mixed_pair(x, y))
    return kiln::ops::scaled_add(x, y, alpha);
  const auto dtype = at::result_type(x, y);
  return kiln::ops::scaled_add(autocast::cast<D>(x, dtype), autocast::cast<D>(y, dtype), alpha);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, Autograd, m) {
  m.impl("scaled_add", scaled_add_autograd);
  m.impl("scaled_add_backward", scaled_add_backward_autograd);
}

KILN_AUTOCAST_KERNELS("scaled_add", scaled_add_autocast)

}  // namespace kiln::ops
