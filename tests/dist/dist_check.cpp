// One process of a multi-process check of kiln::dist::Group (tests/dist/dist_test.sh
// starts several, by hand or with torchrun): reads its rank from the environment,
// builds the group, and checks all-reduce, broadcast and barrier results against what
// every rank can compute alone. Exit 0 and "rank R: ok" on success, 1 on a wrong
// result or a failed collective, 2 on bad input (the environment, the store).
//   dist_check [TIMEOUT_MS] [--die-after-group]
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "dist/process_group.h"
#include "util/error.h"

namespace {

bool check(bool ok, const char* what, int64_t rank) {
  if (!ok) std::fprintf(stderr, "rank %lld: wrong result: %s\n", static_cast<long long>(rank), what);
  return ok;
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
