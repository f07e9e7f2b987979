// One process of a multi-process check of kiln::dist::Group (tests/dist/dist_test.sh
// starts several, by hand or with torchrun): reads its rank from the environment,
// builds the group, and checks all-reduce, broadcast and barrier results against what
// every rank can compute alone, and gradients reduced by c10d's Reducer against one
// process's full-batch gradients. Exit 0 and "rank R: ok" on success, 1 on a wrong
// result or a failed collective, 2 on bad input (the environment, the store).
//   dist_check [TIMEOUT_MS] [--die-after-group]
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "dist/process_group.h"
#include "dist/reducer.h"
#include "nn/mlp.h"
#include "ops/ops.h"
#include "util/error.h"

namespace {

bool check(bool ok, const char* what, int64_t rank) {
  if (!ok) std::fprintf(stderr, "rank %lld: wrong result: %s\n", static_cast<long long>(rank), what);
  return ok;
}

// The largest difference between the gradients of two models of one architecture.
double max_grad_difference(kiln::nn::Mlp& a, kiln::nn::Mlp& b) {
  double worst = 0.0;
  const auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    worst = std::max(worst, (pa[i].grad() - pb[i].grad()).abs().max().item<double>());
  return worst;
}

// c10d's Reducer through GradientReducer: each rank's share of a global batch, in one
// micro-batch or two (the first without a reduction, as DDP's no_sync), gives every
// rank the gradient one process gets from the whole batch. `taped`: the same through
// the Mlp's taped step and the reducer's taped mode (grad_ready, finish_taped).
bool check_reducer(kiln::dist::Group& group, int64_t micro_batches, bool taped) {
  const int64_t r = group.rank(), w = group.size(), rows = 8 * w;
  at::manual_seed(11);  // the same model and data on every rank
  kiln::nn::Mlp model(kiln::nn::MlpOptions(10, {32, 16}, 3));
  kiln::nn::Mlp reference(kiln::nn::MlpOptions(10, {32, 16}, 3));
  {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < model->parameters().size(); ++i) reference->parameters()[i].copy_(model->parameters()[i]);
  }
  const auto x = at::randn({rows, 10}, at::kFloat);
  const auto y = at::randint(0, 3, {rows}, at::kLong);
  kiln::ops::cross_entropy(reference->forward(x), y).backward();  // the whole batch in one process

  kiln::dist::GradientReducer reducer(group, model->parameters(), /*bucket_bytes=*/1 << 10,  // small: several buckets
                                      /*find_unused=*/false, taped);
  const auto mine_x = x.narrow(0, r * 8, 8), mine_y = y.narrow(0, r * 8, 8);
  const auto xs = mine_x.split(8 / micro_batches), ys = mine_y.split(8 / micro_batches);
  kiln::nn::MlpTape tape;
  for (int64_t i = 0; i < micro_batches; ++i) {
    const bool last = i + 1 == micro_batches;
    if (taped) {
      const auto logits = model->forward_taped(xs[i], tape);
      at::AutoDispatchBelowADInplaceOrView below;
      const auto [loss, lse] = kiln::ops::cross_entropy_forward(logits, ys[i]);
      const auto seed = at::ones({}) / static_cast<double>(micro_batches);
      model->backward_taped(kiln::ops::cross_entropy_backward(seed, logits, ys[i], lse), tape, false,
                            last ? [&](const at::Tensor& p) { reducer.grad_ready(p); }
                                 : std::function<void(const at::Tensor&)>());
      if (last) reducer.finish_taped();
      continue;
    }
    if (last) reducer.prepare_for_forward();
    auto loss = kiln::ops::cross_entropy(model->forward(xs[i]), ys[i]) / static_cast<double>(micro_batches);
    if (last) reducer.prepare_for_backward(loss);
    loss.backward();
  }
  const double diff = max_grad_difference(model, reference);
  if (diff > 1e-6)
    std::fprintf(stderr, "rank %lld: %lld micro-batch(es)%s: gradients differ from one process's by %g\n",
                 static_cast<long long>(r), static_cast<long long>(micro_batches), taped ? ", taped" : "", diff);
  else
    std::printf("rank %lld: %lld micro-batch(es)%s, %zu buckets: gradients within %.1e of one process's\n",
                static_cast<long long>(r), static_cast<long long>(micro_batches), taped ? ", taped" : "",
                reducer.buckets().size(), diff);
  return diff <= 1e-6;
}

int run(int argc, char** argv) {
  const auto env = kiln::dist::env_from_environment();
  if (!env) throw kiln::InputError("environment: WORLD_SIZE: expected the number of processes, found none");
  const auto timeout = std::chrono::milliseconds(argc > 1 ? std::atoll(argv[1]) : 30000);
  kiln::dist::Group group(*env, timeout);
  const int64_t r = group.rank(), w = group.size();
  if (argc > 2 && !std::strcmp(argv[2], "--die-after-group") && r == w - 1) {
    std::fprintf(stderr, "rank %lld: exiting on purpose\n", static_cast<long long>(r));
    std::_Exit(3);  // dies without a word to the others
  }
  bool ok = true;
  // All-reduce: rank r holds r+1 everywhere; the sum is w(w+1)/2. Float, double, and
  // a tensor large enough that Gloo splits it.
  std::vector<at::Tensor> t = {at::full({1000}, static_cast<double>(r + 1), at::kFloat),
                               at::full({7}, static_cast<double>(r + 1), at::kDouble),
                               at::full({3 << 20}, static_cast<double>(r + 1), at::kFloat)};
  group.all_reduce_sum_(t);
  const double sum = static_cast<double>(w * (w + 1) / 2);
  for (const auto& x : t) ok &= check(at::all(x == sum).item<bool>(), "all_reduce_sum_", r);
  // Broadcast: rank 0's draw of seed 7 reaches every rank; each rank draws its own first.
  at::manual_seed(static_cast<uint64_t>(100 + r));
  std::vector<at::Tensor> b = {at::randn({64, 33})};
  group.broadcast_(b, 0);
  at::manual_seed(100);
  ok &= check(at::equal(b[0], at::randn({64, 33})), "broadcast_ from rank 0", r);
  group.barrier();
  for (const bool taped : {false, true}) {
    ok &= check_reducer(group, 1, taped);
    ok &= check_reducer(group, 2, taped);
  }
  if (!ok) return 1;
  std::printf("rank %lld: ok (world %lld, local rank %lld, %s store)\n", static_cast<long long>(r),
              static_cast<long long>(w), static_cast<long long>(env->local_rank),
              env->agent_store ? "torchrun's agent" : "rank 0's");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const kiln::InputError& e) {
    std::fprintf(stderr, "dist_check: error: %s\n", e.what());
    return 2;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "dist_check: error: %s\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist_check: error: %s\n", e.what());
    return 1;
  }
}
