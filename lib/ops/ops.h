// kiln's op library as a C++ API: each function calls the registered op through
// the dispatcher, so the device picks the kernel, autograd records it and
// autocast applies the op's policy (docs/ops.md).
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <array>
#include <optional>
#include <tuple>

namespace kiln::ops {

/// x in dtype (a new tensor, strides kept): float32 to and from bfloat16 or float16
/// by kiln's vectorised CPU kernel, rounding to nearest even as ATen's cast does;
/// the gradient is cast back. Kiln's autocast kernels cast with it on the CPU.
/// Example: auto xb = kiln::ops::cast(x, at::kBFloat16);
at::Tensor cast(const at::Tensor& x, at::ScalarType dtype);
/// t in autocast's `dtype` as kiln's autocast kernels cast an operand (ops/autocast.h),
/// for code that runs an autocast region's ops below autocast (nn::Mlp's taped step):
/// a strided CPU tensor through kiln::cast, any other through at::to (the cast autocast's
/// cache holds); a tensor autocast leaves alone (undefined, not floating, float64,
/// already in `dtype`) as it is. Example: auto wb = kiln::ops::autocast_cast(w, at::kBFloat16);
at::Tensor autocast_cast(const at::Tensor& t, at::ScalarType dtype);
/// The gradient of autocast_cast(t, ·) back in t's dtype `from`, as that cast's graph
/// node gives it: kiln::cast for a strided CPU tensor, at::to for any other.
/// Example: auto gw = kiln::ops::autocast_cast_backward(gwb, at::kFloat);
at::Tensor autocast_cast_backward(const at::Tensor& grad, at::ScalarType from);

/// y = max(x, 0), differentiable twice. Example: auto y = kiln::ops::relu(x);
at::Tensor relu(const at::Tensor& x);
/// The gradient of relu given its output: grad where y > 0, else 0.
at::Tensor relu_backward(const at::Tensor& grad, const at::Tensor& y);

/// s = 1 / (1 + exp(−beta·x)); backward beta·s·(1−s)·grad with the local derivative
/// clamped to ±grad_clip when given; differentiable twice.
/// Example: auto s = kiln::ops::sigmoid(x, 2.0, 0.5);
at::Tensor sigmoid(const at::Tensor& x, double beta = 1.0,
                   std::optional<double> grad_clip = std::nullopt);
/// The gradient of sigmoid given its output s.
at::Tensor sigmoid_backward(const at::Tensor& grad, const at::Tensor& s, double beta,
                            std::optional<double> grad_clip);

/// GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))); differentiable twice.
/// Example: auto y = kiln::ops::gelu(x);
at::Tensor gelu(const at::Tensor& x);
/// The exact derivative of the tanh form, times grad.
at::Tensor gelu_backward(const at::Tensor& grad, const at::Tensor& x);

/// gelu(x + b) in one pass; x: (…, N), b: (N). Example: auto y = kiln::ops::bias_gelu(x, b);
at::Tensor bias_gelu(const at::Tensor& x, const at::Tensor& b);
/// (dx, db) of bias_gelu; db is reduced over every leading dimension in the same pass.
std::tuple<at::Tensor, at::Tensor> bias_gelu_backward(const at::Tensor& grad, const at::Tensor& x,
                                                      const at::Tensor& b);

/// alpha·x + y, x and y of one shape and dtype, or one float32 and the other float16 or
/// bfloat16 (computed and returned in float32, as ATen's add promotes, without a float32
/// copy of the half one). Example: auto z = kiln::ops::scaled_add(x, y, 2.0);
at::Tensor scaled_add(const at::Tensor& x, const at::Tensor& y, double alpha);
/// (alpha·grad, grad), the gradients of scaled_add for x and y; with x_dtype (a half
/// type, grad float32: a mixed forward's) the first is rounded to it in the same pass.
std::tuple<at::Tensor, at::Tensor> scaled_add_backward(const at::Tensor& grad, double alpha,
                                                       std::optional<at::ScalarType> x_dtype = std::nullopt);

/// Dropout with a counter-based mask: each element is kept with probability 1 − p and
/// scaled by 1/(1 − p), else becomes x·0 (NaN stays NaN); which elements are kept is a
/// function of (seed, the element's row-major index) alone (Philox4x32-10, the same on
/// CPU and CUDA), so backward is dropout(grad, p, seed) and saves no mask. The output
/// is contiguous. p ∈ [0, 1]; p = 0 copies. Example: auto y = kiln::ops::dropout(x, 0.1, seed);
at::Tensor dropout(const at::Tensor& x, double p, int64_t seed);
/// A seed for dropout drawn from the default CPU generator (its mutex held), as
/// random_dropout draws one. Example: kiln::ops::causal_attention(qkv, h, p, kiln::ops::dropout_seed());
int64_t dropout_seed();
/// dropout(x, p, seed) with a seed drawn from the default CPU generator (torch::manual_seed
/// fixes it, a checkpoint's RNG state resumes it) when training and p > 0; else x itself.
/// Example: y = kiln::ops::random_dropout(y, 0.1, is_training());
at::Tensor random_dropout(const at::Tensor& x, double p, bool training);

/// x·wᵀ + b; x: (B, K), w: (N, K), b: (N) or none. Example: auto y = kiln::ops::linear(x, w, b);
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b);
/// gelu(x·wᵀ + b) with the GELU fused into the matrix multiply on CUDA.
at::Tensor linear_gelu(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b);
/// relu(x·wᵀ + b) as one op and one autograd node: the ReLU runs in place on the
/// product (NaN kept, as kiln::relu); backward masks the gradient by the saved output
/// (no pre-activation kept). Example: auto h = kiln::ops::linear_relu(x, w, b);
at::Tensor linear_relu(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b);
/// Whether linear_gelu's backward takes dz and the bias gradient from one pass of
/// bias_gelu_backward (with a zero bias) rather than gelu_backward and a column sum: where
/// that op has a kernel for z's device. A backward outside autograd (nn::Mlp's taped
/// step) asks it to run the same ops. Example: if (kiln::ops::linear_gelu_bias_grad_in_one_pass(z)) …
bool linear_gelu_bias_grad_in_one_pass(const at::Tensor& z);
/// (gelu(z), z) with z = x·wᵀ + b: the forward of linear_gelu, keeping z for backward.
std::tuple<at::Tensor, at::Tensor> linear_gelu_forward(const at::Tensor& x, const at::Tensor& w,
                                                       const std::optional<at::Tensor>& b);
/// (dx, dw, db) = (grad·w, gradᵀ·x, Σ_rows grad), the gradients of x·wᵀ + b; each
/// only where output_mask = {dx, dw, db} asks for it, undefined elsewhere (autograd
/// asks only for what its inputs need: no dx for a first layer fed with data).
/// Example: auto [dx, dw, db] = kiln::ops::linear_backward(g, x, w, {false, true, true});
std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_backward(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& w,
    std::array<bool, 3> output_mask = {true, true, true});

/// Mean over rows of −log softmax(logits)[target]; logits: (B, C), target: (B) int64.
/// Example: auto loss = kiln::ops::cross_entropy(logits, target);
at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& target);
/// (loss, lse): the mean loss and each row's log-sum-exp (B), kept for backward.
std::tuple<at::Tensor, at::Tensor> cross_entropy_forward(const at::Tensor& logits,
                                                         const at::Tensor& target);
/// grad·(softmax(logits) − onehot(target))/B, from the saved log-sum-exp.
at::Tensor cross_entropy_backward(const at::Tensor& grad, const at::Tensor& logits,
                                  const at::Tensor& target, const at::Tensor& lse);

/// Causal self-attention of every head, fused (flash attention's scheme, bfloat16 on
/// the CPU): qkv (B, T, 3C) holds q, k and v side by side, each C = heads·d wide and
/// split into heads of d columns; returns (B, T, C), head h in columns h·d…h·d+d, of
/// softmax(q·kᵀ/√d with key > query masked)·v. The layouts are those of a qkv
/// projection's output and of the projection after attention, so neither side copies.
/// With dropout_p > 0 the softmax's weights are dropped as kiln::dropout(weights,
/// dropout_p, seed) drops the (B·heads, T, T) weights of the composite form, and backward
/// draws the same mask again (nothing more is saved).
/// Example: auto y = kiln::ops::causal_attention(qkv.view({b, t, 3 * c}), heads);
at::Tensor causal_attention(const at::Tensor& qkv, int64_t heads, double dropout_p = 0.0, int64_t seed = 0);
/// (out, lse): the output and each (batch, head, query)'s log-sum-exp of its scaled
/// scores (the undropped softmax's), (B, heads, T) float32, kept for backward.
std::tuple<at::Tensor, at::Tensor> causal_attention_forward(const at::Tensor& qkv, int64_t heads,
                                                            double dropout_p = 0.0, int64_t seed = 0);
/// dqkv (B, T, 3C) from grad (B, T, C) and the forward's qkv, out, lse and dropout.
at::Tensor causal_attention_backward(const at::Tensor& grad, const at::Tensor& qkv,
                                     const at::Tensor& out, const at::Tensor& lse, int64_t heads,
                                     double dropout_p = 0.0, int64_t seed = 0);

/// Layer norm over x's last dimension: (x − mean)·rstd·weight + bias, rstd =
/// 1/√(var + eps), weight and bias (C) of x's dtype or none. The output is in x's dtype
/// or, with out_dtype float16/bfloat16 for a float32 x, rounded once into that: a
/// float32 residual stream normalised straight into the bfloat16 a product under
/// autocast takes (the CPU kernel does it in one pass; CUDA runs ATen's and casts).
/// Its gradient comes back in x's dtype. Example:
/// auto h = kiln::ops::layer_norm(x, w, b, 1e-5, at::kBFloat16);
at::Tensor layer_norm(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                      const std::optional<at::Tensor>& bias, double eps,
                      std::optional<at::ScalarType> out_dtype = std::nullopt);
/// (y, mean, rstd): mean and rstd of x's shape without its last dimension, float32
/// (float64 for a float64 x), kept for backward.
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_forward(
    const at::Tensor& x, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    double eps, std::optional<at::ScalarType> out_dtype = std::nullopt);
/// (dx, dweight, dbias) from grad (the output's dtype) and the forward's x, weight,
/// mean and rstd, each where output_mask asks (dweight needs a weight).
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward(
    const at::Tensor& grad, const at::Tensor& x, const std::optional<at::Tensor>& weight,
    const at::Tensor& mean, const at::Tensor& rstd, std::array<bool, 3> output_mask);

/// Batch norm over the channels of x (N, C, *) — float32, bfloat16 or float16, channels
/// last or contiguous — with float32 weight, bias and running statistics (C), and a ReLU
/// after it where relu: torch::nn::BatchNorm's arithmetic (training: the batch's
/// statistics, biased variance, the running ones updated in place with momentum and the
/// unbiased variance; else the running ones) in two passes over x each way, the ReLU's
/// mask recomputed in backward. CPU (and Meta) only. Example:
/// auto y = kiln::ops::batch_norm(x, bn->weight, bn->bias, bn->running_mean, bn->running_var, true, 0.1, 1e-5, true);
at::Tensor batch_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      at::Tensor& running_mean, at::Tensor& running_var, bool training, double momentum,
                      double eps, bool relu = false);
/// (y, mean, invstd): the statistics used (the batch's in training, else the running
/// ones), float32 (C), kept for backward.
std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_forward(
    const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, at::Tensor& running_mean,
    at::Tensor& running_var, bool training, double momentum, double eps, bool relu = false);
/// (dx, dweight, dbias) from grad and the forward's x, weight, bias, mean and invstd, each
/// where output_mask asks; training as in the forward (its statistics depend on x).
std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
    const at::Tensor& mean, const at::Tensor& invstd, bool training, bool relu, std::array<bool, 3> output_mask);

/// Max-pool over 2×2 windows with stride 2 (floor: an odd last row or column is
/// dropped), as at::max_pool2d(x, 2): x (N, C, H, W) float32, bfloat16 or float16,
/// channels last or contiguous; the output in x's layout. A NaN wins its window; ties go
/// to the first position. CPU (and Meta) only. Example: auto y = kiln::ops::max_pool2(x);
at::Tensor max_pool2(const at::Tensor& x);
/// (y, code): code (N, C, H/2, W/2) uint8 in y's layout, each window's winner (row·2 + column).
std::tuple<at::Tensor, at::Tensor> max_pool2_forward(const at::Tensor& x);
/// dx of input_size (N, C, H, W): grad at each window's winner, zeros elsewhere; in
/// channels-last memory where channels_last (the forward's x's layout).
at::Tensor max_pool2_backward(const at::Tensor& grad, const at::Tensor& code, at::IntArrayRef input_size,
                              bool channels_last);

/// One AdamW step, in place, over lists of tensors of one dtype and device
/// (params[i], grads[i], exp_avgs[i], exp_avg_sqs[i] of one shape), with the
/// arithmetic of torch::optim::AdamW: p ← p·(1−lr·λ); m ← β1·m + (1−β1)·g;
/// v ← β2·v + (1−β2)·g²; p ← p − lr/(1−β1ᵗ)·m/(√v/√(1−β2ᵗ) + eps), t = step (≥ 1, the
/// count including this update; tensors at different steps need separate calls).
/// One pass per tensor on CPU (vectorised, threads over all tensors' elements);
/// one CUDA launch per 64 tensors. Not differentiable: call it under NoGradGuard.
/// Example: kiln::ops::fused_adamw_(ps, gs, ms, vs, 1e-3, 0.9, 0.999, 1e-2, 1e-8, step);
void fused_adamw_(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                  at::TensorList exp_avg_sqs, double lr, double beta1, double beta2,
                  double weight_decay, double eps, int64_t step);

/// One Lion step, in place, over lists of tensors of one dtype and device (params[i],
/// grads[i], exp_avgs[i] of one shape), with the arithmetic of kiln::optim::Lion:
/// u ← sign(β1·m + (1−β1)·g); p ← p·(1−lr·λ) − lr·u; m ← β2·m + (1−β2)·g. One pass
/// per tensor on CPU (vectorised, threads over all tensors' elements); one CUDA launch
/// per 64 tensors. Not differentiable: call it under NoGradGuard.
/// Example: kiln::ops::fused_lion_(ps, gs, ms, 1e-4, 0.9, 0.99, 0.1);
void fused_lion_(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, double lr,
                 double beta1, double beta2, double weight_decay);

/// One SGD step, in place, with the arithmetic of torch::optim::SGD: d ← g + λ·p;
/// with momentum μ > 0, b ← d on the first step (first_step: the buffers' contents
/// are not read) else μ·b + (1−τ)·d, and d ← d + μ·b (Nesterov) or b; p ← p − lr·d.
/// momentum_buffers is empty when μ = 0. One pass per tensor on CPU; one CUDA launch
/// per 64 tensors. Not differentiable: call it under NoGradGuard.
/// Example: kiln::ops::fused_sgd_(ps, gs, bs, 0.1, 0.9, 0.0, 5e-4, false, step == 1);
void fused_sgd_(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers,
                double lr, double momentum, double dampening, double weight_decay, bool nesterov,
                bool first_step);

/// √(Σ over all tensors of Σ x²), the global 2-norm, in one fused pass: one
/// parallel pass on CPU, one multi-tensor launch on CUDA with no host sync. The
/// tensors share a dtype and device; the result is a 0-dim float32 (float64 for
/// float64 tensors) on that device. Example: auto n = kiln::ops::grad_norm(grads);
at::Tensor grad_norm(at::TensorList tensors);

/// True when the CUDA kernels were compiled into this build.
bool built_with_cuda();

}  // namespace kiln::ops
