// Gradients averaged across a Group's processes by c10d's Reducer — the engine of
// PyTorch's DistributedDataParallel: parameters in buckets, each bucket all-reduced
// as soon as backward has produced its gradients, overlapping the rest of backward.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "dist/process_group.h"

namespace kiln::dist {

/// Example, one step of micro-batches, reduced once:
///   GradientReducer r(group, model->parameters(), 25 << 20);
///   for (i…) { bool last = i + 1 == n; if (last) r.prepare_for_forward();
///              auto loss = …; if (last) r.prepare_for_backward(loss); loss.backward(); }
/// After the last backward every rank holds the mean of the ranks' gradients.
class GradientReducer {
 public:
  /// `bucket_bytes`: the cap of a bucket (DDP's bucket_cap_mb; the first bucket is
  /// capped at 1 MiB, or at bucket_bytes if less, so the first all-reduce starts early).
  /// `find_unused`: some parameters may take no part in a step (a model of run-time
  /// depth): the Reducer then marks them ready itself after backward (DDP's
  /// find_unused_parameters), at the cost of a walk of the graph each step.
  GradientReducer(Group& group, std::vector<at::Tensor> parameters, int64_t bucket_bytes,
                  bool find_unused = false);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  /// Before the forward pass of a backward that reduces (the step's last micro-batch).
  void prepare_for_forward();
  /// After that forward pass, before its backward: arms the Reducer's autograd hooks.
  /// A backward not announced this way (an earlier micro-batch: DDP's no_sync) only
  /// accumulates the local gradients.
  void prepare_for_backward(const at::Tensor& loss);
  /// The buckets (parameter indices), for tests and the run's log.
  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<std::vector<size_t>> buckets_;
};

}  // namespace kiln::dist
