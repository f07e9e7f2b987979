// GradientReducer over c10d::Reducer, set up as DistributedDataParallel sets it up:
// buckets in reverse parameter order (the order backward produces gradients), a 1 MiB
// first bucket, gradients divided by the world size. Reducer's constructor gained
// parameters over torch versions; make_reducer picks the form this libtorch has.
#include "dist/reducer.h"

#include <ATen/ScalarOps.h>
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
  // Taped: the group, the parameters, where each sits (bucket, offset in its flat
  // buffer), each bucket's flat buffer, how many of its gradients are in, and the
  // all-reduces started this step (in bucket order).
  c10d::ProcessGroup* group = nullptr;
  std::vector<at::Tensor> parameters;
  std::unordered_map<const c10::TensorImpl*, size_t> index;
  std::vector<size_t> bucket_of;
  std::vector<int64_t> offset;
  std::vector<at::Tensor> flat;
  std::vector<size_t> ready;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<bool> reported;

  void reset_step() {
    std::fill(ready.begin(), ready.end(), 0);
    std::fill(reported.begin(), reported.end(), false);
    works.clear();
  }
};

GradientReducer::GradientReducer(Group& group, std::vector<at::Tensor> parameters, int64_t bucket_bytes,
                                 bool find_unused, bool taped)
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
  if (!taped) {
    impl_->reducer = make_reducer(std::move(parameters), buckets_,
                                  c10::intrusive_ptr<c10d::ProcessGroup>::reclaim_copy(pg), bucket_bytes,
                                  kFirstBucketBytes, find_unused);
    return;
  }
  auto& m = *impl_;
  m.group = pg;
  m.bucket_of.resize(parameters.size());
  m.offset.resize(parameters.size());
  m.reported.resize(parameters.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    int64_t numel = 0;
    for (const size_t i : buckets_[b]) {
      TORCH_CHECK(parameters[i].is_contiguous(), "GradientReducer: taped: parameter ", i, " is not contiguous");
      m.bucket_of[i] = b;
      m.offset[i] = numel;
      numel += parameters[i].numel();
    }
    m.flat.push_back(at::empty({numel}, parameters[buckets_[b].front()].options().requires_grad(false)));
  }
  m.ready.resize(buckets_.size());
  for (size_t i = 0; i < parameters.size(); ++i) m.index.emplace(parameters[i].unsafeGetTensorImpl(), i);
  m.parameters = std::move(parameters);
}

GradientReducer::~GradientReducer() = default;

void GradientReducer::prepare_for_forward() {
  TORCH_CHECK(impl_->reducer, "GradientReducer: prepare_for_forward on a taped reducer (grad_ready, finish_taped)");
  impl_->reducer->prepare_for_forward();
}

void GradientReducer::prepare_for_backward(const at::Tensor& loss) {
  TORCH_CHECK(impl_->reducer, "GradientReducer: prepare_for_backward on a taped reducer (grad_ready, finish_taped)");
  impl_->reducer->prepare_for_backward({loss});
}

void GradientReducer::grad_ready(const at::Tensor& parameter) {
  auto& m = *impl_;
  TORCH_CHECK(m.group, "GradientReducer: grad_ready on a reducer made for autograd's hooks");
  const auto it = m.index.find(parameter.unsafeGetTensorImpl());
  if (it == m.index.end()) return;
  const size_t i = it->second;
  TORCH_CHECK(!m.reported[i], "GradientReducer: the gradient of parameter ", i, " reported twice in one step");
  const auto& grad = m.parameters[i].grad();
  TORCH_CHECK(grad.defined(), "GradientReducer: parameter ", i, " reported without a gradient");
  m.reported[i] = true;
  // As the Reducer copies a gradient into its bucket: times 1 / processes on the way
  // (at::mul_out with the same wrapped scalar), one pass.
  auto view = m.flat[m.bucket_of[i]].narrow(0, m.offset[i], grad.numel()).view(grad.sizes());
  at::mul_out(view, grad, at::native::wrapped_scalar_tensor(1.0 / static_cast<double>(m.group->getSize())));
  ++m.ready[m.bucket_of[i]];
  // Start every complete bucket after the last started, in order.
  while (m.works.size() < buckets_.size() && m.ready[m.works.size()] == buckets_[m.works.size()].size()) {
    std::vector<at::Tensor> one{m.flat[m.works.size()]};
    m.works.push_back(m.group->allreduce(one));
  }
}

void GradientReducer::finish_taped() {
  auto& m = *impl_;
  TORCH_CHECK(m.group, "GradientReducer: finish_taped on a reducer made for autograd's hooks");
  for (size_t i = 0; i < m.parameters.size(); ++i) {
    if (m.reported[i]) continue;
    for (auto& w : m.works) w->wait();  // no collective left in flight
    m.reset_step();
    TORCH_CHECK(false, "GradientReducer: the gradient of parameter ", i, " was not reported this step");
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    m.works[b]->wait();
    for (const size_t i : buckets_[b]) {
      auto& grad = m.parameters[i].mutable_grad();
      grad.copy_(m.flat[b].narrow(0, m.offset[i], grad.numel()).view(grad.sizes()));
    }
  }
  m.reset_step();
}

}  // namespace kiln::dist
