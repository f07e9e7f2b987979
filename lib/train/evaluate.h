// A model's loss and metrics over a whole data set, in eval mode and without
// autograd: accuracy (and per class) for classifiers, RMSE and R² in the targets'
// own units for regression.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace torch::nn {
class Module;
}

namespace kiln::train {

struct EvalResult {
  /// Mean cross-entropy in nats (classification) or mean squared error of the standardised
  /// targets (regression, the training loss) over all examples.
  double loss = 0.0;
  int64_t examples = 0;
  /// classification: "accuracy" (0..1); regression: "rmse" (the targets' units,
  /// over every target) and "r2" (the mean over targets of 1 − SSE/SST).
  std::map<std::string, double> metrics;
  /// classification but text: the accuracy of each class (NaN for a class with no example).
  std::vector<double> per_class_accuracy;
};

/// The metric names evaluate() gives for a task, the first the one a run reports
/// first: accuracy; rmse, r2.
const std::vector<std::string>& task_metrics(data::Task task);

/// The metrics evaluate() gives for a data set: task_metrics(schema.task), and for
/// text the loss in bits per token too, "bits_per_char" or "bits_per_byte" by the
/// vocabulary.
const std::vector<std::string>& schema_metrics(const data::DataSchema& schema);

/// Whether a larger value of metric `name` (loss, accuracy, rmse, r2) is better.
bool higher_is_better(const std::string& name);

/// Data-parallel evaluation: this process scores rows [rank·N/world, (rank+1)·N/world)
/// of the test set, and `all_reduce_sum` adds the processes' sums (examples, loss,
/// hits and counts per class, squared errors) in place, so every process gets the
/// metrics of the whole set. The default is one process, the whole set.
struct EvalShard {
  int64_t rank = 0, world = 1;
  std::function<void(at::Tensor&)> all_reduce_sum;
};

/// forward: (B, …) → (B, outputs), or (B, T, outputs) for a sequence model whose y
/// is (B, T): each position counts as an example. x and y as data::Dataset holds them.
/// Example: evaluate(fwd, test.x, test.y, 1000, device, data.schema)
EvalResult evaluate(const std::function<at::Tensor(const at::Tensor&)>& forward,
                    const at::Tensor& x, const at::Tensor& y, int64_t batch_size,
                    const at::Device& device, const data::DataSchema& schema,
                    const EvalShard& shard = {});

/// A model's test loss and metrics when it runs at one depth (nn::DepthSampled).
struct DepthEval {
  int64_t depth = 0;
  double loss = 0.0;
  std::map<std::string, double> metrics;  // as EvalResult::metrics
};

/// For a model of run-time depth (nn::DepthSampled): evaluate() with the model forced
/// to each depth min_depth..max_depth in turn, in eval mode (its mode and depth are
/// put back after); empty for any other model. `forward` calls `model`.
/// Example: for (const auto& d : evaluate_each_depth(*module, fwd, test.x, test.y, 1000, device, schema)) …
std::vector<DepthEval> evaluate_each_depth(torch::nn::Module& model,
                                           const std::function<at::Tensor(const at::Tensor&)>& forward,
                                           const at::Tensor& x, const at::Tensor& y, int64_t batch_size,
                                           const at::Device& device, const data::DataSchema& schema,
                                           const EvalShard& shard = {});

/// "test by depth: 1 loss 0.41 accuracy 0.853, 2 …" for the run's log.
std::string describe_depths(const std::vector<DepthEval>& depths);

}  // namespace kiln::train
