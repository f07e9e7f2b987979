// What every kiln op's Tensor-level code shares: argument checks that name the
// op, the argument and what was wrong; the mapping to kernel dtypes; the parallel
// chunking of elementwise CPU kernels.
#pragma once
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/Exception.h>

#include <string_view>

#include "cpu_memory.h"
#include "kernel_types.h"

namespace kiln::ops {

/// Elements per CPU task: small tensors run on one thread, large ones split.
constexpr int64_t kElementwiseGrain = 32768;

/// Whether kiln's kernels take dtype `s`: float32, float64, float16 or bfloat16.
inline bool is_kernel_dtype(at::ScalarType s) {
  return s == at::kFloat || s == at::kDouble || s == at::kHalf || s == at::kBFloat16;
}

/// Throws unless `t` is a defined float32/float64/float16/bfloat16 tensor.
/// Example: check_floating("kiln::relu", "x", x);
inline void check_floating(std::string_view op, std::string_view arg, const at::Tensor& t) {
  TORCH_CHECK(t.defined(), op, ": ", arg, ": expected a tensor, got an undefined one");
  TORCH_CHECK(is_kernel_dtype(t.scalar_type()), op, ": ", arg,
              ": expected a floating-point tensor (float32, float64, float16 or bfloat16), got ",
              t.scalar_type());
}

/// Whether `b` is defined with the shape, dtype and device of `a`: check_like's test
/// without its messages, for callers that check many tensors and format names only
/// for a failure (check_tensor_lists). Example: if (!is_like(p, g)) check_like(…);
inline bool is_like(const at::Tensor& a, const at::Tensor& b) {
  return b.defined() && a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         a.device() == b.device();
}

/// Throws unless `b` has the shape, dtype and device of `a`.
inline void check_like(std::string_view op, std::string_view a_name, const at::Tensor& a,
                       std::string_view b_name, const at::Tensor& b) {
  TORCH_CHECK(b.defined(), op, ": ", b_name, ": expected a tensor, got an undefined one");
  TORCH_CHECK(a.sizes() == b.sizes(), op, ": ", b_name, ": expected shape ", a.sizes(),
              " (the shape of ", a_name, "), got ", b.sizes());
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), op, ": ", b_name, ": expected dtype ",
              a.scalar_type(), " (the dtype of ", a_name, "), got ", b.scalar_type());
  TORCH_CHECK(a.device() == b.device(), op, ": ", b_name, ": expected device ", a.device(),
              " (the device of ", a_name, "), got ", b.device());
}

/// The kernel-side name of a (checked) floating dtype.
inline DType kernel_dtype(at::ScalarType s) {
  switch (s) {
    case at::kFloat: return DType::kFloat;
    case at::kDouble: return DType::kDouble;
    case at::kHalf: return DType::kHalf;
    case at::kBFloat16: return DType::kBFloat16;
    default: TORCH_INTERNAL_ASSERT(false, "kernel_dtype: unchecked dtype ", s);
  }
}
inline DType kernel_dtype(const at::Tensor& t) { return kernel_dtype(t.scalar_type()); }

/// An output with `t`'s shape and, when t is dense (contiguous, channels-last, any
/// permutation), its strides; else contiguous; of t's dtype or `dtype`. On huge pages
/// when it is a large CPU tensor. Example: auto y = output_like(x);
inline at::Tensor output_like(const at::Tensor& t, std::optional<at::ScalarType> dtype = std::nullopt) {
  const auto options = t.options().dtype(dtype.value_or(t.scalar_type()));
  auto out = t.is_non_overlapping_and_dense()
                 ? at::empty_strided(t.sizes(), t.strides(), options)
                 : at::empty_like(t, options, at::MemoryFormat::Contiguous);
  advise_huge_pages(out);
  return out;
}

/// `t` as an elementwise kernel can walk it: its numel elements side by side in
/// memory, in any order of dimensions (dense and non-overlapping: contiguous,
/// channels-last, a permutation), else a contiguous copy. The output takes the same
/// strides, so a channels-last tensor stays channels-last, as with ATen's own ops.
inline at::Tensor dense(const at::Tensor& t) {
  return t.is_non_overlapping_and_dense() ? t : t.contiguous();
}

/// The contiguous inputs of an elementwise op and its freshly allocated output.
struct Elementwise1 {
  at::Tensor x, out;
};
struct Elementwise2 {
  at::Tensor a, b, out;
};

/// Checks a floating input and prepares it. Example: auto e = elementwise("kiln::relu", "x", x);
inline Elementwise1 elementwise(std::string_view op, std::string_view name, const at::Tensor& x) {
  check_floating(op, name, x);
  auto xc = dense(x);
  auto out = output_like(xc);
  return {std::move(xc), std::move(out)};
}

/// Which input of a binary op gives its output's layout when the two differ: the
/// first (scaled_add, as ATen's add), or the second (a backward op's saved
/// activation, as ATen's threshold_backward: a channels-last ConvNet's gradients
/// stay channels-last when a reshape hands one back contiguous).
enum class LayoutFrom { kFirst, kSecond };

/// Checks `b` against the floating `a` (shape, dtype, device) and prepares both
/// with one layout, `from`'s (the other is copied into it; both contiguous when
/// that input is not dense); the output takes it too.
inline Elementwise2 elementwise(std::string_view op, std::string_view a_name, const at::Tensor& a,
                                std::string_view b_name, const at::Tensor& b,
                                LayoutFrom from = LayoutFrom::kFirst) {
  check_floating(op, a_name, a);
  check_like(op, a_name, a, b_name, b);
  // Walked side by side, the two must lay their elements out alike.
  auto ac = dense(a), bc = dense(b);
  if (ac.strides() != bc.strides()) {
    const at::Tensor& lead = from == LayoutFrom::kFirst ? a : b;
    const at::Tensor& other = from == LayoutFrom::kFirst ? b : a;
    at::Tensor l = lead, o;
    if (lead.is_non_overlapping_and_dense()) {
      o = at::empty_strided(lead.sizes(), lead.strides(), other.options()).copy_(other);
    } else {
      l = lead.contiguous();
      o = other.contiguous();
    }
    ac = from == LayoutFrom::kFirst ? l : o;
    bc = from == LayoutFrom::kFirst ? o : l;
  }
  auto out = output_like(ac);
  return {std::move(ac), std::move(bc), std::move(out)};
}

/// Runs `f(begin, end)` over [0, n) in chunks on ATen's intra-op thread pool.
template <typename F>
void parallel_chunks(int64_t n, F&& f) {
  at::parallel_for(0, n, kElementwiseGrain, std::forward<F>(f));
}

/// Byte address of element `i` of a contiguous tensor (for chunked raw kernels).
inline const char* elem_ptr(const at::Tensor& t, int64_t i) {
  return static_cast<const char*>(t.const_data_ptr()) + i * t.element_size();
}
inline char* elem_ptr(at::Tensor& t, int64_t i) {
  return static_cast<char*>(t.data_ptr()) + i * t.element_size();
}

}  // namespace kiln::ops

namespace kiln::ops {

/// Runs kernel(dtype, x, out, n, stores) over threads on a checked, contiguous x and
/// an out like it (out may be x itself: the kernels are elementwise), with the stores
/// the op's size calls for (streaming_stores).
/// Example: cpu_unary_into(z, z, cpu::gelu_forward_impl());  // gelu in place
template <typename Kernel>
void cpu_unary_into(const at::Tensor& x, at::Tensor& out, Kernel kernel) {
  const auto dtype = kernel_dtype(x);
  const auto stores = streaming_stores(x.nbytes() + out.nbytes());
  parallel_chunks(x.numel(), [&](int64_t begin, int64_t end) {
    kernel(dtype, elem_ptr(x, begin), elem_ptr(out, begin), end - begin, stores);
  });
}

/// The CPU Tensor function of a unary elementwise op: checks x, makes it
/// contiguous, allocates, and runs kernel(dtype, x, out, n, stores) over threads.
/// Example: return cpu_unary("kiln::relu", "x", x, cpu::relu_forward_impl());
template <typename Kernel>
at::Tensor cpu_unary(std::string_view op, std::string_view name, const at::Tensor& x, Kernel kernel) {
  auto e = elementwise(op, name, x);
  cpu_unary_into(e.x, e.out, kernel);
  return e.out;
}

/// The same for a binary elementwise op whose output is laid out like `from`'s input:
/// kernel(dtype, a, b, out, n, stores). Example: cpu_binary("kiln::relu_backward", "grad", g, "y", y, k, LayoutFrom::kSecond)
template <typename Kernel>
at::Tensor cpu_binary(std::string_view op, std::string_view a_name, const at::Tensor& a,
                      std::string_view b_name, const at::Tensor& b, Kernel kernel,
                      LayoutFrom from = LayoutFrom::kFirst) {
  auto e = elementwise(op, a_name, a, b_name, b, from);
  const auto dtype = kernel_dtype(e.a);
  const auto stores = streaming_stores(3 * e.out.nbytes());
  parallel_chunks(e.a.numel(), [&](int64_t begin, int64_t end) {
    kernel(dtype, elem_ptr(e.a, begin), elem_ptr(e.b, begin), elem_ptr(e.out, begin), end - begin,
           stores);
  });
  return e.out;
}

}  // namespace kiln::ops
