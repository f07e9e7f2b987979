// Autograd for kiln::layer_norm. The op is CompositeImplicitAutograd: a
// torch::autograd::Function whose forward runs layer_norm_forward below autograd and
// saves (x, weight, mean, rstd), and whose backward calls layer_norm_backward for the
// inputs that need a gradient. Its backward is not itself differentiable: a double
// backward through it is refused with a message. Autocast leaves it alone (no kernel
// of its own: the dispatcher falls through), so it runs in x's dtype and writes
// out_dtype as asked.
#include <torch/autograd.h>
#include <torch/library.h>

#include "../ops.h"

namespace kiln::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class LayerNormFunction : public torch::autograd::Function<LayerNormFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, double eps, std::optional<at::ScalarType> out_dtype) {
    at::AutoDispatchBelowADInplaceOrView guard;
    // An absent weight or bias comes as a 0-element stand-in (autograd's bookkeeping
    // takes only defined tensors as inputs).
    const auto opt = [](const at::Tensor& t) { return t.numel() > 0 ? std::optional(t) : std::nullopt; };
    auto [y, mean, rstd] = kiln::ops::layer_norm_forward(x, opt(weight), opt(bias), eps, out_dtype);
    ctx->save_for_backward({x, opt(weight).value_or(at::Tensor()), mean, rstd});
    ctx->saved_data["bias"] = bias.numel() > 0;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    TORCH_CHECK(!at::GradMode::is_enabled(),
                "kiln::layer_norm: its backward is not differentiable (create_graph=True); "
                "at::layer_norm's is");
    const auto saved = ctx->get_saved_variables();
    const auto& weight = saved[1];
    const bool has_bias = ctx->saved_data["bias"].toBool();
    const std::array<bool, 3> mask = {ctx->needs_input_grad(0), weight.defined() && ctx->needs_input_grad(1),
                                      has_bias && ctx->needs_input_grad(2)};
    auto [dx, dw, db] = kiln::ops::layer_norm_backward(
        grad_outputs[0], saved[0], weight.defined() ? std::optional(weight) : std::nullopt, saved[2],
        saved[3], mask);
    return {dx, dw, db, at::Tensor(), at::Tensor()};
  }
};

at::Tensor layer_norm_composite(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                                const std::optional<at::Tensor>& bias, double eps,
                                std::optional<at::ScalarType> out_dtype) {
  const auto given = [&](const std::optional<at::Tensor>& t) { return t && t->defined(); };
  const bool grad = at::GradMode::is_enabled() && (x.requires_grad() || (given(weight) && weight->requires_grad()) ||
                                                   (given(bias) && bias->requires_grad()));
  if (!grad) {
    at::AutoDispatchBelowADInplaceOrView below;
    return std::get<0>(kiln::ops::layer_norm_forward(x, weight, bias, eps, out_dtype));
  }
  // A zero-element weight or bias is refused by the forward's shape check (C > 0), so
  // the stand-in for an absent one cannot be mistaken for a given one.
  const auto none = at::empty({0}, x.options());
  return LayerNormFunction::apply(x, given(weight) ? *weight : none, given(bias) ? *bias : none, eps, out_dtype);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CompositeImplicitAutograd, m) {
  m.impl("layer_norm", layer_norm_composite);
}

}  // namespace kiln::ops
