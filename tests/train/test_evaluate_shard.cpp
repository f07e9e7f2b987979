// Data-parallel evaluation (train/evaluate.h, EvalShard): two shards whose sums are
// added give the metrics of the whole test set, for classification and regression.
#include <torch/torch.h>

#include "support.h"
#include "train/evaluate.h"

namespace {

using kiln::train::EvalShard;
using kiln::train::evaluate;

// Rank 0's evaluation with rank 1's sums added in, as an all-reduce of two processes gives it.
kiln::train::EvalResult two_shards(const std::function<at::Tensor(const at::Tensor&)>& f, const at::Tensor& x,
                                   const at::Tensor& y, const kiln::data::DataSchema& schema) {
  EvalShard rank0{0, 2, [&](at::Tensor& sums) {
                    at::Tensor other;
                    evaluate(f, x, y, 7, at::kCPU, schema, EvalShard{1, 2, [&](at::Tensor& s) { other = s.clone(); }});
                    sums += other;
                  }};
  return evaluate(f, x, y, 7, at::kCPU, schema, rank0);
}

}  // namespace

TEST_CASE("two evaluation shards, their sums added, give the whole set's metrics", "[train][evaluate][dist]") {
  torch::manual_seed(0);
  const auto w = at::randn({4, 5});
  const auto f = [&](const at::Tensor& x) { return x.matmul(w.t()); };
  kiln::data::DataSchema classes;
  classes.format = "idx";
  classes.outputs = 4;
  const auto x = at::randn({53, 5});  // odd: the shards differ in size
  const auto y = at::randint(0, 4, {53}, at::kLong);
  const auto whole = evaluate(f, x, y, 7, at::kCPU, classes);
  const auto split = two_shards(f, x, y, classes);
  REQUIRE(split.examples == 53);
  // Each batch's loss is summed in float before the double total, and the shards cut the
  // batches elsewhere: equal to float precision.
  REQUIRE(split.loss == Approx(whole.loss).epsilon(1e-6));
  REQUIRE(split.metrics.at("accuracy") == whole.metrics.at("accuracy"));
  REQUIRE(split.per_class_accuracy.size() == 4);
  for (size_t c = 0; c < 4; ++c) REQUIRE(split.per_class_accuracy[c] == whole.per_class_accuracy[c]);
  // A shard alone is not the whole: the reduction is what makes it so.
  const auto alone = evaluate(f, x, y, 7, at::kCPU, classes, EvalShard{0, 2, [](at::Tensor&) {}});
  REQUIRE(alone.examples == 26);

  kiln::data::DataSchema targets;
  targets.format = "csv";
  targets.task = kiln::data::Task::kRegression;
  targets.outputs = 4;
  targets.target_mean = {0, 0, 0, 0};
  targets.target_std = {1, 2, 3, 4};
  const auto t = at::randn({53, 4});
  const auto rw = evaluate(f, x, t, 7, at::kCPU, targets), rs = two_shards(f, x, t, targets);
  REQUIRE(rs.loss == Approx(rw.loss).epsilon(1e-6));
  REQUIRE(rs.metrics.at("rmse") == Approx(rw.metrics.at("rmse")).epsilon(1e-12));
  REQUIRE(rs.metrics.at("r2") == Approx(rw.metrics.at("r2")).epsilon(1e-12));
}

TEST_CASE("R² of a target that does not vary is 1 for exact predictions and 0 otherwise, not 1 − SSE/0",
          "[train][evaluate]") {
  kiln::data::DataSchema targets;
  targets.format = "csv";
  targets.task = kiln::data::Task::kRegression;
  targets.outputs = 2;
  targets.target_mean = {0.5, 0};
  targets.target_std = {1, 1};
  const auto x = at::randn({40, 3});
  // Standardised targets: column 0 constant (0.5 − 0.5 = 0), column 1 varying.
  const auto t = at::stack({at::zeros({40}), at::linspace(-1, 1, 40)}, 1);
  // evaluate hands f the batches in order: exact_rows predicts each batch's own targets.
  int64_t at_row = 0;
  const auto exact_rows = [&](const at::Tensor& in) {
    auto out = t.narrow(0, at_row, in.size(0)).clone();
    at_row += in.size(0);
    return out;
  };
  const auto r_exact = evaluate(exact_rows, x, t, 7, at::kCPU, targets);
  REQUIRE(r_exact.metrics.at("r2") == Approx(1.0));  // both targets exact: 1 and 1
  at_row = 0;
  const auto r_wrong = evaluate([&](const at::Tensor& in) { return exact_rows(in) + 0.25; }, x, t, 7, at::kCPU,
                                targets);
  // Constant target: 0; the other: 1 − 40·0.0625 / Σ(y − ȳ)².
  const auto sst = (t.select(1, 1) - t.select(1, 1).mean()).square().sum().item<double>();
  REQUIRE(std::isfinite(r_wrong.metrics.at("r2")));
  REQUIRE(r_wrong.metrics.at("r2") == Approx((0.0 + (1.0 - 40 * 0.0625 / sst)) / 2).epsilon(1e-6));  // float32 predictions
}
