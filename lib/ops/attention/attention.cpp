// Autograd and autocast for kiln::causal_attention. The op is CompositeImplicitAutograd:
// a torch::autograd::Function whose forward runs causal_attention_forward below
// autograd and saves (qkv, out, lse), and whose backward calls causal_attention_backward.
// With dropout_p > 0 the weights are dropped with kiln::dropout's mask for seed (the
// backward draws it again). Its backward is not itself differentiable: a double backward through it is refused.
// Under autocast qkv is cast to the lower precision (bfloat16 on the CPU), as a
// product's operands are.
#include <torch/autograd.h>
#include <torch/library.h>

#include "../autocast.h"
#include "../ops.h"

namespace kiln::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class CausalAttentionFunction : public torch::autograd::Function<CausalAttentionFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& qkv, int64_t heads, double dropout_p,
                            int64_t seed) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [out, lse] = kiln::ops::causal_attention_forward(qkv, heads, dropout_p, seed);
    ctx->save_for_backward({qkv, out, lse});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["dropout_p"] = dropout_p;  // the mask is drawn again from these two
    ctx->saved_data["seed"] = seed;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    TORCH_CHECK(!at::GradMode::is_enabled(),
                "kiln::causal_attention: its backward is not differentiable (create_graph=True); "
                "the composite attention of kiln::nn::Gpt is (set KILN_CPU_ATTENTION=composite)");
    const auto saved = ctx->get_saved_variables();
    return {kiln::ops::causal_attention_backward(grad_outputs[0], saved[0], saved[1], saved[2],
                                                 ctx->saved_data["heads"].toInt(),
                                                 ctx->saved_data["dropout_p"].toDouble(),
                                                 ctx->saved_data["seed"].toInt()),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor causal_attention_composite(const at::Tensor& qkv, int64_t heads, double dropout_p, int64_t seed) {
  if (!qkv.requires_grad() || !at::GradMode::is_enabled()) {
    at::AutoDispatchBelowADInplaceOrView below;
    return std::get<0>(kiln::ops::causal_attention_forward(qkv, heads, dropout_p, seed));
  }
  return CausalAttentionFunction::apply(qkv, heads, dropout_p, seed);
}

template <c10::DeviceType D>
at::Tensor causal_attention_autocast(const at::Tensor& qkv, int64_t heads, double dropout_p, int64_t seed) {
  autocast::Below<D> below;
  return kiln::ops::causal_attention(autocast::cast<D>(qkv, autocast::lower_dtype<D>()), heads, dropout_p, seed);
}

}  // namespace

TORCH_LIBRARY_IMPL(kiln, CompositeImplicitAutograd, m) {
  m.impl("causal_attention", causal_attention_composite);
}

KILN_AUTOCAST_KERNELS("causal_attention", causal_attention_autocast)

}  // namespace kiln::ops
