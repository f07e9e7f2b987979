// kiln::linear's checks and its ATen formulation: an existing library (MKL/oneDNN
// behind at::addmm on CPU, cuBLAS on CUDA) beats a hand-written kernel, so this is
// the CPU kernel itself and CUDA's path where cuBLASLt's fused epilogue does not apply.
#include "linear_aten.h"
#include "linear_onednn.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/Parallel.h>
#include <ATen/core/stack.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/sum.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <dlfcn.h>

#include <algorithm>
#include <optional>
#include <string>

#include "../cpu_bf16.h"
#include "../gelu/gelu_kernel.h"
#include "../relu/relu_kernel.h"
#include "linear_kernel.h"
#include "../op_support.h"
#include "util/env_switch.h"

namespace kiln::ops {
// kiln::cast (ops.h, which cannot be included here: its function kiln::ops::linear
// would clash with this file's namespace of that name).
at::Tensor cast(const at::Tensor& x, at::ScalarType dtype);
}  // namespace kiln::ops

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

namespace {

// KILN_CPU_LINEAR=auto (the default) | blas | onednn, in env_switch's order.
enum class CpuLinear { kAuto, kBlas, kOnednn };

CpuLinear cpu_linear_policy() {
  static const auto policy =
      static_cast<CpuLinear>(util::env_switch("KILN_CPU_LINEAR", {"auto", "blas", "onednn"}));
  return policy;
}

// Whether float32 products past their thresholds go to oneDNN (linear_onednn.h).
bool float32_onednn() {
  static const bool on =
      cpu_linear_policy() == CpuLinear::kOnednn ||
      (cpu_linear_policy() == CpuLinear::kAuto && linear_float32_onednn_by_default(cpu_vendor()));
  return on;
}

// oneDNN's float32 inner product, mkldnn::_linear_pointwise: libtorch's own op (what
// torch.compile's CPU fusions call), found through the dispatcher so that a libtorch
// without it (built without oneDNN, or with another schema) keeps at::addmm. On the
// Zen 4 EPYC it was 14-27 % faster than at::addmm/at::mm (MKL) for the default
// MLP's and the GPT's layers and 26 % for 2048³, and ~20 µs slower a call for the
// smallest (128×256→10); on an Intel Xeon, where MKL runs its own AVX-512 kernels,
// 4-7 % slower, so float32 stays on MKL there (float32_onednn): docs/performance.md.
const std::optional<c10::OperatorHandle>& onednn_linear_op() {
  static const std::optional<c10::OperatorHandle> op = []() -> std::optional<c10::OperatorHandle> {
    if (cpu_linear_policy() == CpuLinear::kBlas) return std::nullopt;
    auto h = c10::Dispatcher::singleton().findSchema({"mkldnn::_linear_pointwise", ""});
    if (!h || h->schema().arguments().size() != 6) return std::nullopt;
    return h;
  }();
  return op;
}

// Whether a float32 CPU product of a·b·c multiply-adds (t one of its operands) goes to
// a oneDNN path: when float32 products go there at all (float32_onednn), available()
// (asked only then: it may set the path up) and either KILN_CPU_LINEAR=onednn or the
// product is at least 2^log2_min, the size from which that path's per-call cost pays.
template <class Available>
bool onednn_pays_from(const at::Tensor& t, Available available, int64_t a, int64_t b, int64_t c,
                      int log2_min) {
  if (!t.is_cpu() || t.scalar_type() != at::kFloat || !float32_onednn() || !available()) return false;
  if (a == 0 || b == 0 || c == 0) return false;
  return cpu_linear_policy() == CpuLinear::kOnednn ||
         static_cast<double>(a) * static_cast<double>(b) * static_cast<double>(c) >=
             static_cast<double>(int64_t{1} << log2_min);
}

// Whether a (B, K)·(K, N) float32 product on the CPU goes to oneDNN's inner product:
// when libtorch has it and B·K·N ≥ 2^22, past its per-call cost (~20 µs; the default
// MLP's 512→256 layer is 2^24, its 256→10 one 2^18).
bool onednn_pays(const at::Tensor& x, int64_t rows, int64_t k, int64_t n) {
  return onednn_pays_from(x, [] { return onednn_linear_op().has_value(); }, rows, k, n, 22);
}

// oneDNN's float32 matmul, for the weight gradient gradᵀ·x. No dispatcher op offers
// it: _linear_pointwise takes its weight (here xᵀ) contiguous, so it copies x first,
// and at::mm sends float32 to oneDNN only in its reduced-precision modes (bf32/tf32).
// libtorch's own at::native::mkldnn_matmul(a, b, out, beta, alpha) takes strided
// operands as they are; it has no public header, so it is found by its mangled name
// (which encodes the parameter types: another signature is not found) and checked
// once on a small exact product. It refuses CPUs without AVX-512 BW/VL/DQ (it shares
// the check of oneDNN's bf16 path), and then, like a libtorch without it, at::mm
// stays. On the Zen 4 EPYC it was 5-30 % faster than at::mm for the default MLP's
// first layer (784→512: 535-562 against 674-718 µs at batch 128) and the GPT's, and
// level or 10 % slower for 512→256 (docs/performance.md).
using MatmulFn = void (*)(const at::Tensor&, const at::Tensor&, const at::Tensor&, float, float);

MatmulFn onednn_matmul_fn() {
  static const MatmulFn fn = []() -> MatmulFn {
    if (cpu_linear_policy() == CpuLinear::kBlas) return nullptr;
    auto* f = reinterpret_cast<MatmulFn>(
        dlsym(RTLD_DEFAULT, "_ZN2at6native13mkldnn_matmulERKNS_6TensorES3_S3_ff"));
    if (f == nullptr) return nullptr;
    at::DisableRecordFunctionGuard unrecorded;  // a profiler sees only the step's own ops
    // The first call may come from inside a forward under autocast (a bfloat16 linear
    // asks whether oneDNN's bf16 kernels run here): the check's float32 products stay
    // float32.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    try {  // small integers: exact in float32 in any order of summation
      const auto a = at::arange(24, at::kFloat).reshape({6, 4}) - 11;
      const auto b = at::arange(30, at::kFloat).reshape({6, 5}) - 13;
      auto out = at::empty({4, 5}, a.options());
      f(a.t(), b, out, 0.f, 1.f);  // a transposed operand, as gradᵀ is
      if (!at::equal(out, at::mm(a.t(), b))) return nullptr;
    } catch (const std::exception&) {  // c10::Error, or oneDNN's own dnnl::error
      return nullptr;
    }
    return f;
  }();
  return fn;
}

// out = a · b through oneDNN's matmul, recorded for the profiler as its own operator;
// at::mm if oneDNN refuses the operands (it throws its own error type, not c10's).
void onednn_matmul(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  RECORD_FUNCTION("kiln::onednn_matmul", std::vector<c10::IValue>({a, b}));
  try {
    onednn_matmul_fn()(a, b, out, 0.f, 1.f);
  } catch (const std::exception&) {
    at::mm_out(out, a, b);
  }
}

// Whether the (N, B)·(B, K) weight gradient goes to oneDNN's matmul: float32 on the
// CPU, the function found, and N·B·K ≥ 2^23 (the 512→256 layer at batch 32, 2^22,
// was 10 % slower there; the first layer at batch 32, 2^23.6, 20 % faster).
bool onednn_matmul_pays(const at::Tensor& grad, int64_t n, int64_t rows, int64_t k) {
  return onednn_pays_from(grad, [] { return onednn_matmul_fn() != nullptr; }, n, rows, k, 23);
}

// Whether a bfloat16 product with a bias goes to oneDNN's inner product: on the CPU,
// when libtorch has it and this CPU runs oneDNN's bf16 kernels natively (the matmul's
// check above passed: AVX-512 BW/VL/DQ), at every size. at::addmm copies the bias
// into every row of its output first and then adds the product into it; the inner
// product adds the bias in its float32 accumulator (one rounding, no extra pass). On
// the Zen 4 EPYC it was 1.01-1.07x at::addmm at 1024 -> 1024 and the character GPT's
// 192 -> 768 (kiln_bench_ops, docs/performance.md). Without a bias at::mm was as fast.
bool onednn_bf16_pays(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b) {
  if (!x.is_cpu() || x.scalar_type() != at::kBFloat16 || !b || !b->defined()) return false;
  if (cpu_linear_policy() == CpuLinear::kBlas || x.numel() == 0 || w.numel() == 0) return false;
  return onednn_linear_op().has_value() && onednn_matmul_fn() != nullptr;
}

// x · wtᵀ (+ b): wt is (N, K) like a Linear's weight (any strides). The bias is made
// contiguous: with x and wt plain or transposed, mkldnn::_linear_pointwise reads a
// strided bias (b[::2]) as if it were dense and returns a wrong result without an
// error (torch 2.14, float32 and bfloat16); tests/ops/test_linear.cpp covers it.
at::Tensor onednn_linear(const at::Tensor& x, const at::Tensor& wt, const std::optional<at::Tensor>& b) {
  torch::jit::Stack stack;
  stack.reserve(6);
  stack.emplace_back(x);
  stack.emplace_back(wt);
  stack.emplace_back(b && b->defined() ? c10::IValue(b->contiguous()) : c10::IValue());
  stack.emplace_back(std::string("none"));
  stack.emplace_back(c10::List<std::optional<at::Scalar>>());
  stack.emplace_back(c10::IValue());  // algorithm: none
  onednn_linear_op()->callBoxed(&stack);
  return std::move(stack[0]).toTensor();
}

// Whether a float32 CPU product x·wᵀ on the BLAS (MKL) path is computed transposed,
// zᵀ = w·xᵀ into an (N, B) buffer, and then moved into z with the bias added: for
// 16 to 48 rows. MKL's x·wᵀ with that few rows splits them between the threads and
// runs far below its speed for the same product laid out with w's N rows as the
// matrix's rows: on the 2-core Intel Xeon (two threads / one) at 32 rows 784→512 took
// 103 against 126 µs (175 against 208), 512→256 40 against 60 (62 against 78),
// 1024→1024 261 against 405 (499 against 793), the extra pass included; at 8 and 64
// rows the direct form was as fast or faster (docs/performance.md). Only where MKL is
// float32's library (not float32_onednn(): Intel's CPUs, or KILN_CPU_LINEAR=blas); on
// AMD's its small products keep the direct form, unmeasured there.
// KILN_CPU_LINEAR_TRANSPOSED=off keeps the direct form everywhere (for A/B runs).
bool transposed_product_pays(const at::Tensor& x, int64_t rows) {
  static const bool off = util::env_switch("KILN_CPU_LINEAR_TRANSPOSED", {"auto", "off"}) == 1;
  return !off && x.is_cpu() && x.scalar_type() == at::kFloat && rows >= 16 && rows <= 48 &&
         !float32_onednn();
}

// z (B, N) = ztᵀ + b (b may be absent), then relu where asked: the transposed
// product's move into z, its bias and its activation in one pass. zt (N, B) and z are
// contiguous float32. Tiles of 16 of zt's rows: a tile's 16 cache lines hold 16 of its
// columns, read down z's rows in turn while they stay in L1, and each of z's rows gets
// 16 neighbouring values (one or two cache lines). The same float arithmetic as
// at::add_out (one rounding of zt + b) and kiln::relu (0 > v ? 0 : v, the vector
// max(0, v): NaN and -0 kept), so bit for bit the unfused ops. On the 2-core Intel
// Xeon at the default MLP's 32 rows, 784→512: this loop 5.4 µs (alone, bias and relu)
// where add_out reading zt transposed took 20.5 µs and relu after it 5.2; SSE 4×4
// transposes were no faster (4.2-4.9 µs) and are not worth their code
// (docs/performance.md).
template <bool kBias, bool kRelu>
void transposed_tiles(const float* zt, const float* b, float* z, int64_t rows, int64_t n, int64_t t0, int64_t t1) {
  constexpr int64_t kTile = 16;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t c0 = t * kTile, width = std::min(kTile, n - c0);
    const float* in = zt + c0 * rows;
    for (int64_t r = 0; r < rows; ++r) {
      float* out = z + r * n + c0;
      for (int64_t c = 0; c < width; ++c) {
        float v = in[c * rows + r];
        if constexpr (kBias) v += b[c0 + c];  // without a bias no addition: -0 + 0 would be +0
        if constexpr (kRelu) v = 0.0f > v ? 0.0f : v;
        out[c] = v;
      }
    }
  }
}

void transposed_epilogue(const at::Tensor& zt, const std::optional<at::Tensor>& b, at::Tensor& z, bool relu) {
  const int64_t rows = z.size(0), n = z.size(1);
  const at::Tensor bias = b && b->defined() ? b->contiguous() : at::Tensor();
  const float* src = zt.const_data_ptr<float>();
  const float* bp = bias.defined() ? bias.const_data_ptr<float>() : nullptr;
  float* dst = z.mutable_data_ptr<float>();
  const auto tiles_fn = bp ? (relu ? &transposed_tiles<true, true> : &transposed_tiles<true, false>)
                           : (relu ? &transposed_tiles<false, true> : &transposed_tiles<false, false>);
  const int64_t tiles = (n + 15) / 16;
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, rows * 16));
  at::parallel_for(0, tiles, grain,
                   [&](int64_t t0, int64_t t1) { tiles_fn(src, bp, dst, rows, n, t0, t1); });
}

// Whether a float32 CPU product with a bias on the BLAS path (at::addmm: on Intel's
// CPUs past the transposed form's rows, elsewhere below oneDNN's inner-product
// threshold) runs as at::mm without the bias and then kiln's bias pass
// (linear_cpu_kernel.cpp), which adds the bias and applies relu, or writes gelu(z)
// beside z, while z's rows are in cache. at::addmm copies the bias into every row of
// its output and then adds the product into it: on the 2-core Intel Xeon model 207
// (two threads, medians) the default MLP's 128x784 by 784x512 took 467 us as addmm
// against 440 as mm, and the character GPT's 4096x192 by 192x768 5,344 against 4,357
// (4,614 with ATen's add_ of the bias after it); the relu or gelu that follows was a
// pass of its own. The results: the GPT's float32 run gave addmm's loss to every digit;
// the default MLP's run (784- and 512-wide products) ended elsewhere, MKL's addmm
// adding the bias at another point of its sum there (docs/ops.md).
// KILN_CPU_LINEAR_BIAS=pass (default) | addmm, for A/B runs.
bool bias_pass_applies(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b) {
  static const bool off = util::env_switch("KILN_CPU_LINEAR_BIAS", {"pass", "addmm"}) == 1;
  return !off && b && b->defined() && x.is_cpu() && x.scalar_type() == at::kFloat &&
         !onednn_pays(x, x.size(0), x.size(1), w.size(0)) && !transposed_product_pays(x, x.size(0));
}

// The (B, N) output of x·wᵀ, on huge pages when large.
at::Tensor product_output(const at::Tensor& x, const at::Tensor& w) {
  auto z = at::empty({x.size(0), w.size(0)}, x.options());
  advise_huge_pages(z);
  return z;
}

// z (B, N) = x·wᵀ, the product without its bias.
at::Tensor product_without_bias(const at::Tensor& x, const at::Tensor& w) {
  auto z = product_output(x, w);
  at::mm_out(z, x, w.t());
  return z;
}

// The bias pass over z (contiguous float32, from product_without_bias): z += b, then
// relu in place, or y = gelu(z) (y laid out like z; y may be z). Threads take rows.
void bias_pass(cpu::BiasEpilogue e, const at::Tensor& b, at::Tensor& z, at::Tensor* y = nullptr) {
  const int64_t rows = z.size(0), n = z.size(1);
  if (rows == 0 || n == 0) return;
  const at::Tensor bias = b.contiguous();
  const float* bp = bias.const_data_ptr<float>();
  float* zp = z.mutable_data_ptr<float>();
  float* yp = y ? y->mutable_data_ptr<float>() : zp;
  const auto stores = y && yp != zp ? streaming_stores(z.nbytes() + 2 * y->nbytes()) : Stores::kCached;
  const auto fn = cpu::bias_epilogue_impl();
  at::parallel_for(0, rows, std::max<int64_t>(1, kElementwiseGrain / n),
                   [&](int64_t r0, int64_t r1) { fn(e, bp, zp, yp, r0, r1, n, stores); });
}

// Whether a bfloat16 or float16 CPU product runs as a float32 one: its operands cast up
// (exact), the float32 product (MKL or oneDNN, with float32 accumulation), rounded once
// to the operands' dtype: the arithmetic of a native bf16 product (products of the
// rounded values summed in float32, one rounding at the end), in another summation
// order. Where this CPU has no fast bf16 products (cpu_bf16_matmul(): kEmulated, or
// Intel's AVX512-BF16 without AMX, which ran them at about half float32's speed):
// oneDNN's emulated bf16 product here, the Intel Xeon model 207, took 3.6x float32's
// time (128x784 by 784x512), about 50x on an AVX2 EPYC (docs/performance.md), and the
// casts cost a pass over each operand and output. float16 follows bf16's rule: a CPU
// without bf16 products has no fp16 ones either. AMD's AVX512-BF16 and AMX keep their
// native products. KILN_CPU_REDUCED_PRODUCTS=auto (default) | native | float32, for
// A/B runs. Decided once per process.
bool reduced_in_float32_here() {
  static const bool on = [] {
    const auto policy = util::env_switch("KILN_CPU_REDUCED_PRODUCTS", {"auto", "native", "float32"});
    if (policy != 0) return policy == 2;
    return cpu_bf16_matmul() == CpuBf16Matmul::kEmulated || cpu_bf16_matmul() == CpuBf16Matmul::kAvx512Bf16OnePort;
  }();
  return on;
}

// Whether x's product takes that route: a bf16 or fp16 CPU tensor, where it applies.
bool reduced_products_in_float32(const at::Tensor& x) {
  return x.is_cpu() && (x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf) &&
         reduced_in_float32_here();
}

at::Tensor to_float(const at::Tensor& t) { return kiln::ops::cast(t, at::kFloat); }

// z = x·wᵀ + b, then relu where asked, on the paths below.
at::Tensor forward_with(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b, bool relu) {
  const auto activate = [relu](at::Tensor z) {
    // In place: z is ours and not kept. On the CPU kiln's relu kernel (the elementwise
    // runner: z stays in cache from the product at a layer's sizes), elsewhere ATen's.
    if (!relu) return z;
    if (z.is_cpu()) cpu_unary_into(z, z, cpu::relu_forward_impl());
    else at::relu_(z);
    return z;
  };
  if (reduced_products_in_float32(x)) {  // the float32 product, rounded once (above)
    const auto bias = b && b->defined() ? std::optional<at::Tensor>(to_float(*b)) : std::nullopt;
    return activate(kiln::ops::cast(forward_with(to_float(x), to_float(w), bias, false), x.scalar_type()));
  }
  // Not oneDNN's fused "relu" post-op where the product runs there: it turns NaN into 0
  // (a max against zero; tests/ops/test_linear.cpp caught it), kiln::relu keeps NaN.
  if (onednn_pays(x, x.size(0), x.size(1), w.size(0)) || onednn_bf16_pays(x, w, b))
    return activate(onednn_linear(x, w, b));
  if (bias_pass_applies(x, w, b)) {
    auto z = product_without_bias(x, w);
    bias_pass(relu ? cpu::BiasEpilogue::kBiasRelu : cpu::BiasEpilogue::kBias, *b, z);
    return z;
  }
  auto z = product_output(x, w);
  if (transposed_product_pays(x, x.size(0))) {
    transposed_epilogue(at::mm(w, x.t()), b, z, relu);  // the product (N, B), moved into z
    return z;
  }
  if (b && b->defined()) return activate(at::addmm_out(z, *b, x, w.t()));
  return activate(at::mm_out(z, x, w.t()));
}

}  // namespace

// z: (B, N) = x: (B, K) · wᵀ: (K, N) + b: (N) broadcast over rows. On the CPU in
// float32, and in bfloat16 with a bias, oneDNN's inner product where it pays (above);
// else the library's GEMM writes in place into an output on huge pages when it is
// large (cpu_memory.h), transposed first for 16 to 48 rows in float32, and in float32
// with a bias otherwise at::mm and kiln's bias pass (above).
at::Tensor forward_aten(const at::Tensor& x, const at::Tensor& w,
                        const std::optional<at::Tensor>& b) {
  return forward_with(x, w, b, /*relu=*/false);
}

at::Tensor relu_aten(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b) {
  return forward_with(x, w, b, /*relu=*/true);
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
  if (bias_pass_applies(x, w, b)) {  // the bias and the gelu in one pass after the product
    auto z = product_without_bias(x, w);
    auto y = output_like(z);
    bias_pass(cpu::BiasEpilogue::kBiasGelu, *b, z, &y);
    return {std::move(y), std::move(z)};
  }
  auto z = forward_aten(x, w, b);
  auto y = output_like(z);
  gelu_into(z, y);
  return {std::move(y), std::move(z)};
}

at::Tensor gelu_aten(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b) {
  if (bias_pass_applies(x, w, b)) {
    auto z = product_without_bias(x, w);
    bias_pass(cpu::BiasEpilogue::kBiasGelu, *b, z, &z);
    return z;
  }
  auto z = forward_aten(x, w, b);
  gelu_into(z, z);  // z is ours and not kept: no second (B, N) buffer
  return z;
}

// dx: (B, K) = grad: (B, N) · w: (N, K); dw: (N, K) = gradᵀ · x; db: (N) = Σ_rows grad.
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_aten(const at::Tensor& grad,
                                                             const at::Tensor& x,
                                                             const at::Tensor& w,
                                                             std::array<bool, 3> output_mask) {
  if (reduced_products_in_float32(grad)) {  // float32 products, each rounded once (above)
    // x's values serve dw only, w's dx only: the other is passed for its shape.
    auto [dx, dw, none] = backward_aten(to_float(grad), output_mask[1] ? to_float(x) : x,
                                        output_mask[0] ? to_float(w) : w, {output_mask[0], output_mask[1], false});
    const auto dtype = grad.scalar_type();
    return {dx.defined() ? kiln::ops::cast(dx, dtype) : dx, dw.defined() ? kiln::ops::cast(dw, dtype) : dw,
            output_mask[2] ? at::sum(grad, 0) : at::Tensor()};  // ATen's sum: float32 accumulators
  }
  at::Tensor dx, dw, db;
  // dx = grad · w = grad · (wᵀ)ᵀ: oneDNN's inner product with wᵀ as its weight where
  // it pays; dw = gradᵀ · x: oneDNN's matmul on the strided operands where it pays
  // (the inner product would copy x transposed first), else at::mm.
  if (output_mask[0]) {
    if (onednn_pays(grad, grad.size(0), grad.size(1), w.size(1))) dx = onednn_linear(grad, w.t(), std::nullopt);
    else dx = output_like(x, grad.scalar_type()), at::mm_out(dx, grad, w);
  }
  if (output_mask[1]) {
    dw = output_like(w, grad.scalar_type());
    if (onednn_matmul_pays(grad, grad.size(1), grad.size(0), x.size(1))) onednn_matmul(grad.t(), x, dw);
    else at::mm_out(dw, grad.t(), x);
  }
  if (output_mask[2]) db = at::sum(grad, 0);
  return {std::move(dx), std::move(dw), std::move(db)};
}

}  // namespace kiln::ops::linear

namespace kiln::ops {
bool linear_onednn_matmul_available() { return linear::onednn_matmul_fn() != nullptr; }
bool linear_float32_onednn_by_default(std::string_view vendor) { return vendor != "GenuineIntel"; }
bool linear_float32_onednn() { return linear::float32_onednn(); }
bool linear_reduced_in_float32() { return linear::reduced_in_float32_here(); }
}  // namespace kiln::ops
