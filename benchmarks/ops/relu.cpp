// relu against at::relu (forward) and at::threshold_backward (backward), and two
// relus in a row ("fwd2"): the second reads what the first wrote, so the pair shows
// what the first one's stores cost its consumer (streaming stores, docs/ops.md).
#include "cases.h"
#include "ops/ops.h"

KILN_BENCH_CASES(relu) {
  const auto x = at::randn({n}, options), g = at::randn({n}, options);
  const auto y = at::relu(x);
  const double bytes = static_cast<double>(x.element_size()) * n;  // one tensor
  return {
      {"relu", "fwd", [=] { kiln::ops::relu(x); }, [=] { at::relu(x); }, 2 * bytes},
      {"relu", "bwd", [=] { kiln::ops::relu_backward(g, y); }, [=] { at::threshold_backward(g, y, 0); },
       3 * bytes},
      {"relu", "fwd2", [=] { kiln::ops::relu(kiln::ops::relu(x)); }, [=] { at::relu(at::relu(x)); },
       4 * bytes},
  };
}
