// What the tests of the fused optimizer steps share (fused_lion_, fused_sgd_): lists of
// tensors mid-training, and the three checks every step passes — against a plain-ATen
// reference computed in float64 in every dtype over tensors of awkward sizes, against
// the reference in float32 for tensors laid out unlike their parameter, and CUDA
// against the CPU kernel over more tensors than one launch takes.
#pragma once
#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ops/kernel_types.h"
#include "ops/multi_tensor.h"
#include "support.h"

namespace kiln::test {

/// lists[k][i]: tensor i of list k (list 0 the params, 1 the grads, then the state).
using TensorLists = std::vector<std::vector<at::Tensor>>;
/// The fused step under test, in place.
using FusedStep = std::function<void(TensorLists&)>;
/// The reference step of tensor i of every list, in place, in plain ATen.
using ReferenceStep = std::function<void(TensorLists&, size_t i)>;

inline TensorLists map_lists(const TensorLists& l, const std::function<at::Tensor(const at::Tensor&)>& f) {
  TensorLists out(l.size());
  for (size_t k = 0; k < l.size(); ++k)
    for (const auto& t : l[k]) out[k].push_back(f(t));
  return out;
}

/// `lists` lists of tensors of `sizes` mid-training: random params and grads, state
/// (lists 2…) as from earlier steps.
inline TensorLists random_lists(const std::vector<int64_t>& sizes, at::ScalarType dtype, size_t lists) {
  TensorLists l(lists);
  const auto o = at::TensorOptions().dtype(dtype);
  for (const auto n : sizes) {
    l[0].push_back(at::randn({n}, o)), l[1].push_back(at::randn({n}, o));
    for (size_t k = 2; k < lists; ++k) l[k].push_back(at::randn({n}, o) * 0.1);
  }
  return l;
}

/// `steps` fused steps in every floating dtype against the reference in float64, over
/// sizes that are no multiple of any vector width, split and batched between threads.
inline void require_matches_float64(const FusedStep& step, const ReferenceStep& reference,
                                    size_t lists, int steps = 3) {
  const std::vector<int64_t> sizes = {1, 7, 33, 1000, 70001, 5, 40000, 3};
  for (const auto dtype : kFloatingDtypes) {
    INFO("dtype " << dtype);
    at::manual_seed(2);
    auto ours = random_lists(sizes, dtype, lists);
    auto ref = map_lists(ours, [](const at::Tensor& t) { return t.to(at::kDouble); });
    for (int s = 1; s <= steps; ++s) {
      step(ours);
      for (size_t i = 0; i < sizes.size(); ++i) reference(ref, i);
      // Half types round every step, so the float64 trajectory drifts by a few roundings.
      const auto tol = tolerance_for(dtype);
      for (size_t k = 0; k < lists; ++k)
        for (size_t i = 0; i < sizes.size(); ++i) {
          INFO("step " << s << ", list " << k << ", tensor " << i << " (" << sizes[i] << " elements)");
          KILN_REQUIRE_CLOSE(ours[k][i], ref[k][i], tol.rtol * s, tol.atol * s);
        }
    }
  }
}

/// Two fused steps on a transposed parameter with state of its layout, a strided
/// slice (not dense) with contiguous grads and state, and a contiguous parameter whose
/// state is a transposed view of other memory, against the reference.
inline void require_layouts_work(const FusedStep& step, const ReferenceStep& reference, size_t lists) {
  at::manual_seed(3);
  TensorLists ours(lists);
  ours[0].push_back(at::randn({8, 6}).t());
  ours[1].push_back(at::randn({8, 6}).t());
  ours[0].push_back(at::randn({8, 12}).slice(1, 0, 12, 2));
  ours[1].push_back(at::randn({8, 6}));
  ours[0].push_back(at::randn({5, 7}));
  ours[1].push_back(at::randn({5, 7}));
  for (size_t k = 2; k < lists; ++k) {
    ours[k].push_back(at::randn({8, 6}).t() * 0.1);
    ours[k].push_back(at::randn({8, 6}) * 0.1);
    ours[k].push_back(at::randn({7, 5}).t() * 0.1);
  }
  auto ref = map_lists(ours, [](const at::Tensor& t) { return t.clone(); });
  for (int s = 0; s < 2; ++s) {
    step(ours);
    for (size_t i = 0; i < 3; ++i) reference(ref, i);
  }
  for (size_t k = 0; k < lists; ++k)
    for (size_t i = 0; i < 3; ++i) {
      INFO("list " << k << ", tensor " << i);
      KILN_REQUIRE_CLOSE(ours[k][i], ref[k][i], 1e-5, 1e-6);
    }
  // The slice's update landed in the memory of the tensor it views.
  REQUIRE(ours[0][1].is_view());
  REQUIRE(!ours[0][1].is_contiguous());
}

/// The fused step on CUDA against the CPU kernel: 151 tensors of odd sizes (more than
/// the 64 of one launch), tensor 3 at an offset of one element so its pointers are not
/// 16-byte aligned. Skips without a GPU.
inline void require_cuda_matches_cpu_step(const FusedStep& step, size_t lists) {
  if (!cuda_available_or_skip()) return;
  std::vector<int64_t> sizes;
  for (int i = 0; i < 150; ++i) sizes.push_back(1 + (i * 7919) % 9000);
  sizes.push_back(300000);
  const size_t n = sizes.size();
  const auto f = [&](const std::vector<at::Tensor>& t) {
    TensorLists l(lists);
    for (size_t k = 0; k < lists; ++k) {
      l[k].assign(t.begin() + k * n, t.begin() + (k + 1) * n);
      auto shifted = at::empty({sizes[3] + 1}, t[0].options()).narrow(0, 1, sizes[3]);
      l[k][3] = shifted.copy_(l[k][3]);
    }
    step(l);
    std::vector<at::Tensor> out;
    for (size_t k = 0; k < lists; ++k)
      if (k != 1) out.insert(out.end(), l[k].begin(), l[k].end());
    return out;
  };
  for (const auto dtype : kFloatingDtypes) {
    INFO("dtype " << dtype);
    at::manual_seed(4);
    const auto l = random_lists(sizes, dtype, lists);
    std::vector<at::Tensor> inputs;
    for (const auto& list : l) inputs.insert(inputs.end(), list.begin(), list.end());
    require_cuda_matches_cpu(f, inputs, tolerance_for(dtype));
  }
}

/// Every CPU build of a fused step's raw kernel (fn(dtype, span, coefficients, reads),
/// from KILN_CPU_BUILDS) in every floating dtype, `lists` lists of each length around
/// the prefetch distance (2 KiB: 256 to 1,024 elements by dtype) and past it, with
/// Reads::kAhead gives the bits of Reads::kHardware: each element updated once, the
/// prefetching loop and the one after it meeting where they should.
template <typename Fn, typename Coefficients>
void require_prefetch_changes_no_bit(const std::vector<std::pair<std::string, Fn>>& builds,
                                     const Coefficients& c, size_t lists) {
  const std::vector<int64_t> lengths = {1, 15, 16, 255, 256, 257, 511, 512, 513, 1023, 1024, 1041, 2048, 3001, 70001};
  const std::vector<std::pair<at::ScalarType, ops::DType>> dtypes = {
      {at::kFloat, ops::DType::kFloat}, {at::kDouble, ops::DType::kDouble},
      {at::kHalf, ops::DType::kHalf}, {at::kBFloat16, ops::DType::kBFloat16}};
  REQUIRE(lists <= static_cast<size_t>(ops::kMaxTensorLists));
  for (const auto& [name, fn] : builds)
    for (const auto& [dtype, kernel_dtype] : dtypes)
      for (const auto n : lengths) {
        INFO(name << " build, " << dtype << ", " << n << " elements");
        at::manual_seed(6);
        // State as an earlier step leaves it: non-negative (AdamW's v under its sqrt).
        auto start = random_lists({n}, dtype, lists);
        for (size_t k = 2; k < lists; ++k) start[k][0].abs_();
        const auto run = [&](ops::Reads reads) {
          auto l = map_lists(start, [](const at::Tensor& t) { return t.clone(); });
          ops::TensorSpan span{{}, n};
          for (size_t k = 0; k < lists; ++k) span.data[k] = l[k][0].data_ptr();
          fn(kernel_dtype, span, c, reads);
          return l;
        };
        const auto ahead = run(ops::Reads::kAhead), hardware = run(ops::Reads::kHardware);
        for (size_t k = 0; k < lists; ++k) {
          INFO("list " << k);
          REQUIRE(at::equal(ahead[k][0], hardware[k][0]));
          // The step wrote it (a half type's small update may round back to the old value).
          if (k != 1 && (dtype == at::kFloat || dtype == at::kDouble)) REQUIRE(!at::equal(ahead[k][0], start[k][0]));
        }
      }
}

}  // namespace kiln::test
