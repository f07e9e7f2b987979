// Every kiln op schema, declared once, and the C++ API that calls them through
// the dispatcher. Backends register their kernels in <op>/<op>_{cpu,cuda,meta}.cpp,
// autograd and autocast in <op>/<op>.cpp.
#include "ops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

TORCH_LIBRARY(kiln, m) {
  m.def("cast(Tensor x, ScalarType dtype) -> Tensor");
  m.def("relu(Tensor x) -> Tensor");
  m.def("relu_backward(Tensor grad, Tensor y) -> Tensor");
  m.def("sigmoid(Tensor x, float beta=1.0, float? grad_clip=None) -> Tensor");
  m.def("sigmoid_backward(Tensor grad, Tensor s, float beta, float? grad_clip) -> Tensor");
  m.def("gelu(Tensor x) -> Tensor");
  m.def("gelu_backward(Tensor grad, Tensor x) -> Tensor");
  m.def("bias_gelu(Tensor x, Tensor b) -> Tensor");
  m.def("bias_gelu_backward(Tensor grad, Tensor x, Tensor b) -> (Tensor, Tensor)");
  m.def("dropout(Tensor x, float p, int seed) -> Tensor");
  m.def("scaled_add(Tensor x, Tensor y, float alpha) -> Tensor");
  m.def("scaled_add_backward(Tensor(a) grad, float alpha, ScalarType? x_dtype=None) -> (Tensor, Tensor(a))");
  m.def("linear(Tensor x, Tensor w, Tensor? b) -> Tensor");
  m.def("linear_gelu(Tensor x, Tensor w, Tensor? b) -> Tensor");
  m.def("linear_relu(Tensor x, Tensor w, Tensor? b) -> Tensor");
  m.def("linear_gelu_forward(Tensor x, Tensor w, Tensor? b) -> (Tensor, Tensor)");
  m.def("linear_backward(Tensor grad, Tensor x, Tensor w, bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
  m.def("cross_entropy(Tensor logits, Tensor target) -> Tensor");
  m.def("cross_entropy_forward(Tensor logits, Tensor target) -> (Tensor, Tensor)");
  m.def("cross_entropy_backward(Tensor grad, Tensor logits, Tensor target, Tensor lse) -> Tensor");
  m.def("causal_attention(Tensor qkv, int heads, float dropout_p=0.0, int seed=0) -> Tensor");
  m.def("causal_attention_forward(Tensor qkv, int heads, float dropout_p=0.0, int seed=0) -> (Tensor, Tensor)");
  m.def("causal_attention_backward(Tensor grad, Tensor qkv, Tensor out, Tensor lse, int heads, "
        "float dropout_p=0.0, int seed=0) -> Tensor");
  m.def("layer_norm(Tensor x, Tensor? weight, Tensor? bias, float eps, ScalarType? out_dtype=None) -> Tensor");
  m.def("layer_norm_forward(Tensor x, Tensor? weight, Tensor? bias, float eps, ScalarType? out_dtype=None) -> (Tensor, Tensor, Tensor)");
  m.def("layer_norm_backward(Tensor grad, Tensor x, Tensor? weight, Tensor mean, Tensor rstd, bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
  m.def("batch_norm(Tensor x, Tensor weight, Tensor bias, Tensor(a!) running_mean, Tensor(b!) running_var, "
        "bool training, float momentum, float eps, bool relu=False) -> Tensor");
  m.def("batch_norm_forward(Tensor x, Tensor weight, Tensor bias, Tensor(a!) running_mean, Tensor(b!) running_var, "
        "bool training, float momentum, float eps, bool relu=False) -> (Tensor, Tensor, Tensor)");
  m.def("batch_norm_backward(Tensor grad, Tensor x, Tensor weight, Tensor bias, Tensor mean, Tensor invstd, "
        "bool training, bool relu, bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
  m.def("max_pool2(Tensor x) -> Tensor");
  m.def("max_pool2_forward(Tensor x) -> (Tensor, Tensor)");
  m.def("max_pool2_backward(Tensor grad, Tensor code, int[] input_size, bool channels_last) -> Tensor");
  m.def("fused_adamw_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, "
        "Tensor(c!)[] exp_avg_sqs, float lr, float beta1, float beta2, float weight_decay, "
        "float eps, int step) -> ()");
  m.def("fused_lion_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, float lr, "
        "float beta1, float beta2, float weight_decay) -> ()");
  m.def("fused_sgd_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] momentum_buffers, float lr, "
        "float momentum, float dampening, float weight_decay, bool nesterov, bool first_step) -> ()");
  m.def("grad_norm(Tensor[] tensors) -> Tensor");
}

namespace kiln::ops {
namespace {

using Tensor = at::Tensor;
using OptTensor = std::optional<at::Tensor>;
using Tensor2 = std::tuple<at::Tensor, at::Tensor>;
using Tensor3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// The typed handle of kiln::<name>, looked up once per call site.
template <typename Signature>
c10::TypedOperatorHandle<Signature> op_handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

#define KILN_CALL(NAME, SIGNATURE, ...)                                          \
  static const auto op = op_handle<SIGNATURE>("kiln::" #NAME);                  \
  return op.call(__VA_ARGS__)

}  // namespace

Tensor cast(const Tensor& x, at::ScalarType dtype) { KILN_CALL(cast, Tensor(const Tensor&, at::ScalarType), x, dtype); }

Tensor relu(const Tensor& x) { KILN_CALL(relu, Tensor(const Tensor&), x); }
Tensor relu_backward(const Tensor& grad, const Tensor& y) {
  KILN_CALL(relu_backward, Tensor(const Tensor&, const Tensor&), grad, y);
}

Tensor sigmoid(const Tensor& x, double beta, std::optional<double> grad_clip) {
  KILN_CALL(sigmoid, Tensor(const Tensor&, double, std::optional<double>), x, beta, grad_clip);
}
Tensor sigmoid_backward(const Tensor& grad, const Tensor& s, double beta,
                        std::optional<double> grad_clip) {
  KILN_CALL(sigmoid_backward, Tensor(const Tensor&, const Tensor&, double, std::optional<double>),
            grad, s, beta, grad_clip);
}

Tensor dropout(const Tensor& x, double p, int64_t seed) {
  KILN_CALL(dropout, Tensor(const Tensor&, double, int64_t), x, p, seed);
}

Tensor gelu(const Tensor& x) { KILN_CALL(gelu, Tensor(const Tensor&), x); }
Tensor gelu_backward(const Tensor& grad, const Tensor& x) {
  KILN_CALL(gelu_backward, Tensor(const Tensor&, const Tensor&), grad, x);
}

Tensor bias_gelu(const Tensor& x, const Tensor& b) {
  KILN_CALL(bias_gelu, Tensor(const Tensor&, const Tensor&), x, b);
}
Tensor2 bias_gelu_backward(const Tensor& grad, const Tensor& x, const Tensor& b) {
  KILN_CALL(bias_gelu_backward, Tensor2(const Tensor&, const Tensor&, const Tensor&), grad, x, b);
}

Tensor scaled_add(const Tensor& x, const Tensor& y, double alpha) {
  KILN_CALL(scaled_add, Tensor(const Tensor&, const Tensor&, double), x, y, alpha);
}
Tensor2 scaled_add_backward(const Tensor& grad, double alpha, std::optional<at::ScalarType> x_dtype) {
  KILN_CALL(scaled_add_backward, Tensor2(const Tensor&, double, std::optional<at::ScalarType>), grad,
            alpha, x_dtype);
}

Tensor linear(const Tensor& x, const Tensor& w, const OptTensor& b) {
  KILN_CALL(linear, Tensor(const Tensor&, const Tensor&, const OptTensor&), x, w, b);
}
Tensor linear_gelu(const Tensor& x, const Tensor& w, const OptTensor& b) {
  KILN_CALL(linear_gelu, Tensor(const Tensor&, const Tensor&, const OptTensor&), x, w, b);
}
Tensor linear_relu(const Tensor& x, const Tensor& w, const OptTensor& b) {
  KILN_CALL(linear_relu, Tensor(const Tensor&, const Tensor&, const OptTensor&), x, w, b);
}
Tensor2 linear_gelu_forward(const Tensor& x, const Tensor& w, const OptTensor& b) {
  KILN_CALL(linear_gelu_forward, Tensor2(const Tensor&, const Tensor&, const OptTensor&), x, w, b);
}
Tensor3 linear_backward(const Tensor& grad, const Tensor& x, const Tensor& w,
                        std::array<bool, 3> output_mask) {
  KILN_CALL(linear_backward, Tensor3(const Tensor&, const Tensor&, const Tensor&, std::array<bool, 3>),
            grad, x, w, output_mask);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target) {
  KILN_CALL(cross_entropy, Tensor(const Tensor&, const Tensor&), logits, target);
}
Tensor2 cross_entropy_forward(const Tensor& logits, const Tensor& target) {
  KILN_CALL(cross_entropy_forward, Tensor2(const Tensor&, const Tensor&), logits, target);
}
Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target,
                              const Tensor& lse) {
  KILN_CALL(cross_entropy_backward,
            Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&), grad, logits,
            target, lse);
}

Tensor causal_attention(const Tensor& qkv, int64_t heads, double dropout_p, int64_t seed) {
  KILN_CALL(causal_attention, Tensor(const Tensor&, int64_t, double, int64_t), qkv, heads, dropout_p, seed);
}
Tensor2 causal_attention_forward(const Tensor& qkv, int64_t heads, double dropout_p, int64_t seed) {
  KILN_CALL(causal_attention_forward, Tensor2(const Tensor&, int64_t, double, int64_t), qkv, heads, dropout_p,
            seed);
}
Tensor causal_attention_backward(const Tensor& grad, const Tensor& qkv, const Tensor& out,
                                 const Tensor& lse, int64_t heads, double dropout_p, int64_t seed) {
  KILN_CALL(causal_attention_backward,
            Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, double, int64_t), grad,
            qkv, out, lse, heads, dropout_p, seed);
}

using OptTensor = std::optional<Tensor>;
using OptDtype = std::optional<at::ScalarType>;
Tensor layer_norm(const Tensor& x, const OptTensor& weight, const OptTensor& bias, double eps, OptDtype out_dtype) {
  KILN_CALL(layer_norm, Tensor(const Tensor&, const OptTensor&, const OptTensor&, double, OptDtype), x, weight,
            bias, eps, out_dtype);
}
Tensor3 layer_norm_forward(const Tensor& x, const OptTensor& weight, const OptTensor& bias, double eps,
                           OptDtype out_dtype) {
  KILN_CALL(layer_norm_forward, Tensor3(const Tensor&, const OptTensor&, const OptTensor&, double, OptDtype), x,
            weight, bias, eps, out_dtype);
}
Tensor3 layer_norm_backward(const Tensor& grad, const Tensor& x, const OptTensor& weight, const Tensor& mean,
                            const Tensor& rstd, std::array<bool, 3> output_mask) {
  KILN_CALL(layer_norm_backward,
            Tensor3(const Tensor&, const Tensor&, const OptTensor&, const Tensor&, const Tensor&, std::array<bool, 3>),
            grad, x, weight, mean, rstd, output_mask);
}

Tensor max_pool2(const Tensor& x) { KILN_CALL(max_pool2, Tensor(const Tensor&), x); }
Tensor2 max_pool2_forward(const Tensor& x) { KILN_CALL(max_pool2_forward, Tensor2(const Tensor&), x); }
Tensor max_pool2_backward(const Tensor& grad, const Tensor& code, at::IntArrayRef input_size, bool channels_last) {
  KILN_CALL(max_pool2_backward, Tensor(const Tensor&, const Tensor&, at::IntArrayRef, bool), grad, code, input_size,
            channels_last);
}
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                  Tensor& running_var, bool training, double momentum, double eps, bool relu) {
  KILN_CALL(batch_norm, Tensor(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, bool, double, double, bool),
            x, weight, bias, running_mean, running_var, training, momentum, eps, relu);
}
Tensor3 batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                           Tensor& running_var, bool training, double momentum, double eps, bool relu) {
  KILN_CALL(batch_norm_forward,
            Tensor3(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, bool, double, double, bool), x,
            weight, bias, running_mean, running_var, training, momentum, eps, relu);
}
Tensor3 batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const Tensor& mean, const Tensor& invstd, bool training, bool relu,
                            std::array<bool, 3> output_mask) {
  KILN_CALL(batch_norm_backward,
            Tensor3(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool,
                    bool, std::array<bool, 3>),
            grad, x, weight, bias, mean, invstd, training, relu, output_mask);
}

void fused_adamw_(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                  at::TensorList exp_avg_sqs, double lr, double beta1, double beta2,
                  double weight_decay, double eps, int64_t step) {
  // With every list empty the dispatcher has no tensor to pick a kernel by; the
  // kernels check that the lists have one length.
  if (params.empty() && grads.empty() && exp_avgs.empty() && exp_avg_sqs.empty()) return;
  using TL = at::TensorList;
  KILN_CALL(fused_adamw_, void(TL, TL, TL, TL, double, double, double, double, double, int64_t),
            params, grads, exp_avgs, exp_avg_sqs, lr, beta1, beta2, weight_decay, eps, step);
}

void fused_lion_(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, double lr,
                 double beta1, double beta2, double weight_decay) {
  if (params.empty() && grads.empty() && exp_avgs.empty()) return;  // as fused_adamw_
  using TL = at::TensorList;
  KILN_CALL(fused_lion_, void(TL, TL, TL, double, double, double, double), params, grads,
            exp_avgs, lr, beta1, beta2, weight_decay);
}

void fused_sgd_(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers,
                double lr, double momentum, double dampening, double weight_decay, bool nesterov,
                bool first_step) {
  if (params.empty() && grads.empty() && momentum_buffers.empty()) return;  // as fused_adamw_
  using TL = at::TensorList;
  KILN_CALL(fused_sgd_, void(TL, TL, TL, double, double, double, double, bool, bool), params,
            grads, momentum_buffers, lr, momentum, dampening, weight_decay, nesterov, first_step);
}

Tensor grad_norm(at::TensorList tensors) {
  // The dispatcher needs a tensor to pick a backend: check emptiness here.
  TORCH_CHECK(!tensors.empty(), "kiln::grad_norm: tensors: expected at least one tensor, got none");
  KILN_CALL(grad_norm, Tensor(at::TensorList), tensors);
}

#undef KILN_CALL

bool built_with_cuda() {
#if defined(KILN_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

}  // namespace kiln::ops
