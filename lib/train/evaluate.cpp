// evaluate(): sums per-example losses, hits and squared errors in double so the
// result does not depend on the batch size.
#include "train/evaluate.h"

#include <torch/nn/functional/loss.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "nn/depth_sampled.h"

namespace kiln::train {

const std::vector<std::string>& task_metrics(data::Task task) {
  static const std::vector<std::string> classification = {"accuracy"}, regression = {"rmse", "r2"};
  return task == data::Task::kRegression ? regression : classification;
}

const std::vector<std::string>& schema_metrics(const data::DataSchema& schema) {
  static const std::vector<std::string> chars = {"accuracy", "bits_per_char"},
                                        bytes = {"accuracy", "bits_per_byte"};
  if (schema.format != "text") return task_metrics(schema.task);
  const auto& vocab = schema.transform.at("vocabulary");
  return vocab.value("type", "") == "bytes" ? bytes : chars;
}

bool higher_is_better(const std::string& name) { return name == "accuracy" || name == "r2"; }

EvalResult evaluate(const std::function<at::Tensor(const at::Tensor&)>& forward,
                    const at::Tensor& x_all, const at::Tensor& y_all, int64_t batch_size,
                    const at::Device& device, const data::DataSchema& schema, const EvalShard& shard) {
  // This process's rows of the test set (all of them alone).
  const int64_t total = x_all.size(0), from = total * shard.rank / shard.world,
                to = total * (shard.rank + 1) / shard.world;
  const auto x = x_all.narrow(0, from, to - from), y = y_all.narrow(0, from, to - from);
  namespace F = torch::nn::functional;
  torch::NoGradGuard no_grad;
  const bool text = schema.format == "text";
  int64_t n = 0;  // examples, or for a sequence model the positions scored
  const bool regression = schema.task == data::Task::kRegression;
  const int64_t k = schema.outputs;
  double loss_sum = 0.0;
  // classification: hits and examples per class; regression: per target, the sums
  // of squared errors, of targets and of squared targets (standardised units).
  auto hits = at::zeros({k}, at::kDouble), counts = at::zeros({k}, at::kDouble);
  auto sse = at::zeros({k}, at::kDouble), sum_y = at::zeros({k}, at::kDouble),
       sum_y2 = at::zeros({k}, at::kDouble);
  for (int64_t start = 0; start < x.size(0); start += batch_size) {
    const int64_t rows = std::min(batch_size, x.size(0) - start);
    const auto xb = x.narrow(0, start, rows).to(device);
    auto yb = y.narrow(0, start, rows).to(device);
    auto out = forward(xb).to(at::kFloat);  // (B, k), or (B, T, k) for a sequence model
    if (out.dim() == 3) {  // every position is one prediction
      out = out.reshape({-1, k});
      yb = yb.reshape(-1);
    }
    const int64_t len = out.size(0);
    n += len;
    if (regression) {
      const auto err = (out - yb).to(at::kDouble);  // (B, k)
      sse += err.square().sum(0).cpu();
      sum_y += yb.to(at::kDouble).sum(0).cpu();
      sum_y2 += yb.to(at::kDouble).square().sum(0).cpu();
      loss_sum += err.square().mean(1).sum().item<double>();
    } else {
      loss_sum += F::cross_entropy(out, yb, F::CrossEntropyFuncOptions().reduction(torch::kSum))
                      .item<double>();
      const auto hit = out.argmax(1).eq(yb).to(at::kDouble);
      hits.index_add_(0, yb.cpu(), hit.cpu());
      counts.index_add_(0, yb.cpu(), at::ones({len}, at::kDouble));
    }
  }
  if (shard.world > 1) {  // the processes' sums, added up
    auto sums = at::cat({at::tensor({static_cast<double>(n), loss_sum}, at::kDouble), hits, counts, sse, sum_y, sum_y2});
    shard.all_reduce_sum(sums);
    n = static_cast<int64_t>(std::llround(sums[0].item<double>()));
    loss_sum = sums[1].item<double>();
    const auto parts = sums.narrow(0, 2, 5 * k).split(k);
    hits = parts[0].clone();
    counts = parts[1].clone();
    sse = parts[2].clone();
    sum_y = parts[3].clone();
    sum_y2 = parts[4].clone();
  }
  EvalResult r;
  r.examples = n;
  r.loss = n ? loss_sum / n : 0.0;
  if (n == 0) return r;
  if (regression) {
    // Back in the targets' units: an error of e standardised units is e·std.
    const auto sd = at::tensor(schema.target_std, at::kDouble);
    r.metrics["rmse"] = std::sqrt((sse * sd.square()).sum().item<double>() / (n * k));
    const auto sst = sum_y2 - sum_y.square() / n;  // Σ(y − ȳ)², per target
    // A target that does not vary in the test split (Σ(y − ȳ)² zero, or rounding's
    // remainder of it) has no R² of its own: 1 where the predictions are exact, else
    // 0, as scikit-learn's r2_score (force_finite) gives it, not 1 − SSE/0.
    const auto constant = sst <= 1e-12 * sum_y2;
    const auto r2 = at::where(constant, (sse == 0).to(at::kDouble),
                              1.0 - sse / sst.clamp_min(std::numeric_limits<double>::min()));
    r.metrics["r2"] = r2.mean().item<double>();
  } else {
    r.metrics["accuracy"] = hits.sum().item<double>() / n;
    if (text) {  // the loss in bits per token instead of a table of characters
      r.metrics[schema_metrics(schema)[1]] = r.loss / std::log(2.0);
    } else {
      const auto per = hits / counts;  // 0/0 = NaN: no example of that class
      r.per_class_accuracy.assign(per.data_ptr<double>(), per.data_ptr<double>() + k);
    }
  }
  return r;
}

std::vector<DepthEval> evaluate_each_depth(torch::nn::Module& model,
                                           const std::function<at::Tensor(const at::Tensor&)>& forward,
                                           const at::Tensor& x, const at::Tensor& y, int64_t batch_size,
                                           const at::Device& device, const data::DataSchema& schema,
                                           const EvalShard& shard) {
  auto* dynamic = dynamic_cast<nn::DepthSampled*>(&model);
  if (!dynamic) return {};
  // Put the model's mode and depth back however the loop ends.
  struct Restore {
    torch::nn::Module& model;
    nn::DepthSampled& dynamic;
    bool training;
    ~Restore() {
      dynamic.force_depth(std::nullopt);
      model.train(training);
    }
  } restore{model, *dynamic, model.is_training()};
  model.eval();
  std::vector<DepthEval> out;
  for (int64_t d = dynamic->min_depth(); d <= dynamic->max_depth(); ++d) {
    dynamic->force_depth(d);
    auto r = evaluate(forward, x, y, batch_size, device, schema, shard);
    out.push_back({d, r.loss, std::move(r.metrics)});
  }
  return out;
}

std::string describe_depths(const std::vector<DepthEval>& depths) {
  std::ostringstream s;
  s << "test by depth:";
  for (size_t i = 0; i < depths.size(); ++i) {
    s << (i ? "," : "") << " " << depths[i].depth << " loss " << depths[i].loss;
    for (const auto& [name, value] : depths[i].metrics) s << " " << name << " " << value;
  }
  return s.str();
}

}  // namespace kiln::train
