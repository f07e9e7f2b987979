// linear against at::addmm (forward), at::mm twice and a sum (backward),
// linear_gelu against at::gelu(at::addmm(…), "tanh"), and linear_relu against
// at::relu(at::addmm(…)) alone ("fwd") and through autograd, forward and backward
// ("fwd+bwd": one kiln node against at::linear's and at::relu's); n is the element count of
// x: (n / 1024, 1024), with w: (1024, 1024). With float32 on the CPU also the bfloat16
// forward with a bias, at that shape ("bf16-fwd") and at the character GPT's first MLP
// layer, x: (n / 192, 192), w: (768, 192) ("bf16-gpt"), against at::addmm in bfloat16,
// and that layer in float32 ("gpt": linear; "gpt-keep": linear_gelu_forward, which
// keeps z for the backward).
#include "cases.h"
#include "ops/ops.h"

KILN_BENCH_CASES(linear) {
  constexpr int64_t K = 1024, N = 1024;
  const int64_t B = std::max<int64_t>(n / K, 1);
  const auto x = at::randn({B, K}, options), w = at::randn({N, K}, options) / 32;
  const auto b = at::randn({N}, options), g = at::randn({B, N}, options);
  std::vector<kiln::bench::Case> cases = {
      {"linear", "fwd", [=] { kiln::ops::linear(x, w, b); }, [=] { at::addmm(b, x, w.t()); }},
      {"linear", "bwd", [=] { kiln::ops::linear_backward(g, x, w); },
       [=] {
         at::mm(g, w);
         at::mm(g.t(), x);
         at::sum(g, 0);
       }},
      {"linear_gelu", "fwd", [=] { kiln::ops::linear_gelu(x, w, b); },
       [=] { at::gelu(at::addmm(b, x, w.t()), "tanh"); }},
      {"linear_relu", "fwd", [=] { kiln::ops::linear_relu(x, w, b); },
       [=] { at::relu(at::addmm(b, x, w.t())); }},
  };
  if (options.dtype() != at::kDouble) {  // the benchmark's dtypes are floating
    // x, w and b as a hidden layer's: each side's gradients accumulate into its own.
    const auto leaf = [](const at::Tensor& t) { return t.detach().clone().requires_grad_(true); };
    const auto xk = leaf(x), wk = leaf(w), bk = leaf(b), xa = leaf(x), wa = leaf(w), ba = leaf(b);
    cases.push_back({"linear_relu", "fwd+bwd", [=] { kiln::ops::linear_relu(xk, wk, bk).backward(g); },
                     [=] { at::relu(at::linear(xa, wa, ba)).backward(g); }});
  }
  if (options.dtype() == at::kFloat && options.device().is_cpu()) {
    // The character GPT's first MLP layer in float32, x: (n / 192, 192), w: (768, 192):
    // its linear with a bias ("gpt") and its linear_gelu keeping z, as training does
    // ("gpt-keep"), against at::addmm and at::gelu.
    constexpr int64_t kK = 192, kN = 768;
    const auto xf = at::randn({std::max<int64_t>(n / kK, 1), kK}, options), wf = at::randn({kN, kK}, options) / 14;
    const auto bf = at::randn({kN}, options);
    cases.push_back({"linear", "gpt", [=] { kiln::ops::linear(xf, wf, bf); }, [=] { at::addmm(bf, xf, wf.t()); }});
    cases.push_back({"linear_gelu", "gpt-keep", [=] { kiln::ops::linear_gelu_forward(xf, wf, bf); },
                     [=] { at::gelu(at::addmm(bf, xf, wf.t()), "tanh"); }});
    const auto xb = x.to(at::kBFloat16), wb = w.to(at::kBFloat16), bb = b.to(at::kBFloat16);
    cases.push_back({"linear", "bf16-fwd", [=] { kiln::ops::linear(xb, wb, bb); },
                     [=] { at::addmm(bb, xb, wb.t()); }});
    constexpr int64_t kGptK = 192, kGptN = 768;
    const auto xg = at::randn({std::max<int64_t>(n / kGptK, 1), kGptK}, options).to(at::kBFloat16);
    const auto wg = (at::randn({kGptN, kGptK}, options) / 14).to(at::kBFloat16);
    const auto bg = at::randn({kGptN}, options).to(at::kBFloat16);
    cases.push_back({"linear", "bf16-gpt", [=] { kiln::ops::linear(xg, wg, bg); },
                     [=] { at::addmm(bg, xg, wg.t()); }});
  }
  return cases;
}
