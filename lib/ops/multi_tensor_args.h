// What the fused optimizer steps' Tensor-level code shares (adamw, lion, sgd): the
// checks of their tensor lists (lengths, shapes, dtypes, devices; CPU, CUDA and
// Meta), the raw spans of every tensor with the layout fix-up for tensors that are
// not dense or do not share their parameter's strides (updated in dense copies and
// copied back), the CPU driver that spreads all tensors' elements over threads, and
// the autograd entry that refuses to be recorded and bumps the version counters.
#pragma once
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty_like.h>

#include <algorithm>
#include <initializer_list>
#include <vector>

#include "cpu_memory.h"
#include "multi_tensor.h"
#include "op_support.h"

namespace kiln::ops {

/// One list argument of a fused step: its name in messages, its tensors, and whether
/// the step writes them (params and state) or only reads them (grads).
struct TensorListArg {
  const char* name;
  at::TensorList tensors;
  bool written;
};

/// Throws unless every list has the length of the first (the params), and tensor i
/// of every list is a dense tensor of params[i]'s shape, with every tensor of one
/// floating dtype and one device. Reads no data. Example:
/// check_tensor_lists("kiln::fused_lion_", {{"params", ps, true}, {"grads", gs, false}, {"exp_avgs", ms, true}});
inline void check_tensor_lists(const char* op, std::initializer_list<TensorListArg> lists) {
  const auto& params = lists.begin()[0];
  const size_t n = params.tensors.size();
  bool one_length = true;
  for (const auto& l : lists) one_length = one_length && l.tensors.size() == n;
  if (!one_length) {
    std::string lengths;
    for (size_t k = 0; k < lists.size(); ++k) {
      const auto& l = lists.begin()[k];
      lengths += c10::str(k == 0 ? "" : k + 1 == lists.size() ? " and " : ", ", l.tensors.size(), " ",
                          l.name);
    }
    TORCH_CHECK(false, op, ": expected lists of one length, got ", lengths);
  }
  if (n == 0) return;
  const at::Tensor& first = params.tensors[0];
  check_floating(op, c10::str(params.name, "[0]"), first);
  // The names ("grads[7]") are formatted only for a message: formatting them for every
  // tensor cost 2 µs a tensor, twice ATen's whole per-tensor cost in _fused_adamw_.
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& p = params.tensors[i];
    TORCH_CHECK(p.defined() && p.layout() == at::kStrided, op, ": ", params.name, "[", i,
                "]: expected a dense tensor");
    TORCH_CHECK(p.scalar_type() == first.scalar_type(), op, ": ", params.name, "[", i,
                "]: expected dtype ", first.scalar_type(), " (every tensor of one call shares the dtype of ",
                params.name, "[0]), got ", p.scalar_type());
    TORCH_CHECK(p.device() == first.device(), op, ": ", params.name, "[", i, "]: expected device ",
                first.device(), " (the device of ", params.name, "[0]), got ", p.device());
    for (auto l = lists.begin() + 1; l != lists.end(); ++l) {
      const at::Tensor& x = l->tensors[i];
      if (!is_like(p, x)) check_like(op, c10::str(params.name, "[", i, "]"), p, c10::str(l->name, "[", i, "]"), x);
      TORCH_CHECK(x.layout() == at::kStrided, op, ": ", l->name, "[", i,
                  "]: expected a dense tensor, got layout ", x.layout());
    }
  }
}

/// The spans a fused step's kernels update, after check_tensor_lists.
struct MultiTensorArgs {
  DType dtype = DType::kFloat;
  int lists = 0;
  int written = 0;  // lists the step writes
  std::vector<TensorSpan> spans;  // one per non-empty tensor
  // (tensor the caller passed, dense working copy) for every written copy that was
  // made; copy_back() writes the results back.
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;
  std::vector<at::Tensor> read_only_copies;  // read lists in the parameter's layout

  void copy_back() {
    for (auto& [original, work] : copies) original.copy_(work);
  }
  /// The bytes the step's pass moves: every list read once, the written ones stored.
  int64_t bytes() const {
    int64_t n = 0;
    for (const auto& s : spans) n += s.n;
    return n * elem_size(dtype) * (lists + written);
  }
};

/// check_tensor_lists, then one span per non-empty tensor: the first list's tensor
/// as it is when dense (else a contiguous copy), every other list's in that layout
/// (copied where its strides differ).
inline MultiTensorArgs multi_tensor_args(const char* op, std::initializer_list<TensorListArg> lists) {
  TORCH_INTERNAL_ASSERT(lists.size() <= static_cast<size_t>(kMaxTensorLists));
  check_tensor_lists(op, lists);
  MultiTensorArgs a;
  a.lists = static_cast<int>(lists.size());
  for (const auto& l : lists) a.written += l.written ? 1 : 0;
  const auto& params = lists.begin()[0];
  if (params.tensors.empty()) return a;
  a.dtype = kernel_dtype(params.tensors[0]);
  a.spans.reserve(params.tensors.size());
  for (size_t i = 0; i < params.tensors.size(); ++i) {
    const at::Tensor& p = params.tensors[i];
    if (p.numel() == 0) continue;
    // The kernels walk raw memory, so every list's tensor must be dense in one layout:
    // the parameter's own when it is dense, else contiguous.
    const at::Tensor pw = dense(p);
    TensorSpan span{{}, pw.numel()};
    int k = 0;
    for (const auto& l : lists) {
      const at::Tensor& x = l.tensors[i];
      at::Tensor w = k == 0 ? pw : x;
      if (k > 0 && x.strides() != pw.strides()) w = at::empty_like(pw).copy_(x);
      if (!w.is_same(x)) {
        if (l.written) a.copies.emplace_back(x, w);
        else a.read_only_copies.push_back(w);  // owns a span's memory
      }
      span.data[k++] = l.written ? w.data_ptr() : const_cast<void*>(w.const_data_ptr());
    }
    a.spans.push_back(span);
  }
  return a;
}

/// Runs kernel(span, reads) over the elements of every span laid end to end, split
/// over ATen's intra-op threads: large tensors are shared between threads and small
/// ones batched into one task. Each call gets a piece of one span (pointers moved to
/// its first element) and the reads the whole step takes (prefetch_reads of its
/// bytes: a software prefetch for a pass from memory).
/// Example: cpu_for_each_span(a, [&](const TensorSpan& s, Reads r) { kernel(a.dtype, s, c, r); });
template <typename Kernel>
void cpu_for_each_span(const MultiTensorArgs& a, Kernel&& kernel) {
  const Reads reads = prefetch_reads(a.bytes());
  // offsets[i]: where span i starts in the concatenated element range.
  std::vector<int64_t> offsets(a.spans.size() + 1, 0);
  for (size_t i = 0; i < a.spans.size(); ++i) offsets[i + 1] = offsets[i] + a.spans[i].n;
  const int64_t size = elem_size(a.dtype);
  at::parallel_for(0, offsets.back(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    // The span holding `begin`, then every span until `end`.
    size_t i = std::upper_bound(offsets.begin(), offsets.end(), begin) - offsets.begin() - 1;
    for (int64_t pos = begin; pos < end; ++i) {
      const auto& s = a.spans[i];
      const int64_t from = pos - offsets[i], to = std::min(end, offsets[i + 1]) - offsets[i];
      TensorSpan piece{{}, to - from};
      for (int k = 0; k < a.lists; ++k) piece.data[k] = static_cast<char*>(s.data[k]) + from * size;
      kernel(piece, reads);
      pos = offsets[i] + to;
    }
  });
}

/// The Autograd entry of a fused step: a step is not differentiable, so it refuses
/// to run where autograd would record it (a parameter that requires grad, grad mode
/// on), runs `below` (the device kernel) below autograd, and bumps the version
/// counters of the tensors it updated in place, as ATen's in-place ops do, so that
/// autograd notices a stale save. Example: see lion/lion.cpp.
template <typename Below>
void optimizer_step_autograd(const char* op, at::TensorList params,
                             std::initializer_list<at::TensorList> written, Below&& below) {
  if (at::GradMode::is_enabled())
    for (size_t i = 0; i < params.size(); ++i)
      TORCH_CHECK(!params[i].defined() || !params[i].requires_grad(), op, ": params[", i,
                  "] requires grad and grad mode is on; an optimizer step is not differentiable, "
                  "run it under torch::NoGradGuard");
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    below();
  }
  for (const auto list : written)
    for (const auto& t : list) t.unsafeGetTensorImpl()->bump_version();
}

}  // namespace kiln::ops
