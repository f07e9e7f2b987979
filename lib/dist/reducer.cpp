// GradientReducer over c10d::Reducer, set up as DistributedDataParallel sets it up:
// buckets in reverse parameter order (the order backward produces gradients), a 1 MiB
// first bucket, gradients divided by the world size. Reducer's constructor gained
// parameters over torch versions; make_reducer picks the form this libtorch has.
#include "dist/reducer.h"

#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <algorithm>
#include <numeric>
#include <type_traits>

namespace kiln::dist {
namespace {

using Buckets = std::vector<std::vector<size_t>>;
using Names = std::unordered_map<size_t, std::string>;

template <typename R = c10d::Reducer>
std::unique_ptr<R> make_reducer(std::vector<at::Tensor> params, Buckets buckets,
                                c10::intrusive_ptr<c10d::ProcessGroup> group, int64_t bucket_bytes,
                                int64_t first_bucket_bytes, bool find_unused) {
  std::vector<bool> sparse(params.size(), false);
  // torch 2.14: bucket_bytes_cap_list after use_python_reducer; older: without it.
  if constexpr (std::is_constructible_v<R, std::vector<at::Tensor>, Buckets, c10::intrusive_ptr<c10d::ProcessGroup>,
                                        std::vector<bool>, int64_t, bool, bool, Names, int64_t, bool, bool,
                                        std::vector<int64_t>>) {
    return std::make_unique<R>(std::move(params), std::move(buckets), std::move(group), std::move(sparse),
                               bucket_bytes, find_unused, /*gradient_as_bucket_view=*/false,
                               Names{}, first_bucket_bytes, /*skip_all_reduce_unused_params=*/false,
                               /*use_python_reducer=*/false, std::vector<int64_t>{});
  } else {
    return std::make_unique<R>(std::move(params), std::move(buckets), std::move(group), std::move(sparse),
                               bucket_bytes, find_unused, /*gradient_as_bucket_view=*/false,
                               Names{}, first_bucket_bytes, /*skip_all_reduce_unused_params=*/false,
                               /*use_python_reducer=*/false);
  }
}

}  // namespace

struct GradientReducer::Impl {
  std::unique_ptr<c10d::Reducer> reducer;
};

GradientReducer::GradientReducer(Group& group, std::vector<at::Tensor> parameters, int64_t bucket_bytes,
                                 bool find_unused)
    : impl_(std::make_unique<Impl>()) {
  // DDP's first bucket of 1 MiB (the first all-reduce starts early), or less when
  // every bucket is to be smaller.
  const int64_t kFirstBucketBytes = std::min<int64_t>(1 << 20, bucket_bytes);
  // Reverse order: backward produces the last parameters' gradients first.
  std::vector<at::Tensor> reversed(parameters.rbegin(), parameters.rend());
  std::vector<int64_t> indices(parameters.size());
  std::iota(indices.rbegin(), indices.rend(), 0);
  buckets_ = std::get<0>(c10d::compute_bucket_assignment_by_size(
      reversed, {static_cast<size_t>(kFirstBucketBytes), static_cast<size_t>(bucket_bytes)},
      std::vector<bool>(parameters.size(), false), indices));
  auto* pg = static_cast<c10d::ProcessGroup*>(group.c10d_process_group());
  impl_->reducer = make_reducer(std::move(parameters), buckets_,
                                c10::intrusive_ptr<c10d::ProcessGroup>::reclaim_copy(pg), bucket_bytes,
                                kFirstBucketBytes, find_unused);
}

GradientReducer::~GradientReducer() = default;

void GradientReducer::prepare_for_forward() { impl_->reducer->prepare_for_forward(); }

void GradientReducer::prepare_for_backward(const at::Tensor& loss) { impl_->reducer->prepare_for_backward({loss}); }

}  // namespace kiln::dist
