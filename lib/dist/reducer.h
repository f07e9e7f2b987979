// Gradients averaged across a Group's processes by c10d's Reducer — the engine of
// PyTorch's DistributedDataParallel: parameters in buckets, each bucket all-reduced
// as soon as backward has produced its gradients, overlapping the rest of backward.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <unordered_map>
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
  /// `taped`: for a backward that runs without autograd (the taped step), which
  /// reports each gradient itself (grad_ready) and then calls finish_taped(): no
  /// c10d::Reducer (its hooks are autograd's); the same buckets, each all-reduced as soon
  /// as its gradients are in, while backward goes on, with the Reducer's arithmetic
  /// (each gradient times 1 / processes into the bucket, summed, copied back).
  GradientReducer(Group& group, std::vector<at::Tensor> parameters, int64_t bucket_bytes,
                  bool find_unused = false, bool taped = false);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  /// Before the forward pass of a backward that reduces (the step's last micro-batch).
  void prepare_for_forward();
  /// After that forward pass, before its backward: arms the Reducer's autograd hooks.
  /// A backward not announced this way (an earlier micro-batch: DDP's no_sync) only
  /// accumulates the local gradients.
  void prepare_for_backward(const at::Tensor& loss);
  /// Taped: `parameter`'s gradient (its .grad) is final for this step; the bucket it
  /// completes, and every complete one after the last started, starts its all-reduce,
  /// buckets in order (every process issues the same collectives in the same order).
  /// A tensor that is not one of the reduced parameters is ignored.
  void grad_ready(const at::Tensor& parameter);
  /// Taped, after backward: waits for every bucket's all-reduce and puts the mean of
  /// the processes' gradients into each parameter's .grad. A parameter whose gradient
  /// was not reported throws, naming it by index, and resets the step's state.
  void finish_taped();
  /// The buckets (parameter indices), for tests and the run's log.
  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<std::vector<size_t>> buckets_;
};

}  // namespace kiln::dist
