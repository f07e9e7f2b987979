// Meta kernels of every kiln op: on meta tensors each op returns outputs with the
// sizes, strides, dtype and aliasing of the CPU kernel's outputs on data of the same
// layout, refuses bad arguments with the CPU kernel's message and a mix of meta and
// CPU tensors naming the argument, runs under autograd, and carries a whole Mlp
// through forward and backward at a batch size no memory could hold.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>

#include <functional>
#include <string>
#include <vector>

#include "nn/mlp.h"
#include "ops/ops.h"
#include "support.h"

namespace {

using Tensors = std::vector<at::Tensor>;
using OpFn = std::function<Tensors(const Tensors&)>;

// The dtypes every comparison runs in: float32, a half type each, and float64
// (which changes cross_entropy's lse and grad_norm's result dtype).
const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kHalf, at::kBFloat16, at::kDouble};

// A meta tensor with t's sizes, strides and dtype (t.to(at::kMeta) would make a
// sliced, non-dense t contiguous, and the comparison would test another layout).
at::Tensor to_meta(const at::Tensor& t) {
  if (!t.defined()) return t;
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta));
}

Tensors to_meta(const Tensors& ts) {
  Tensors out;
  for (const auto& t : ts) out.push_back(to_meta(t));
  return out;
}

// The message of the c10::Error that f throws, or "" when it throws none.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

// Runs f on the CPU inputs and on meta tensors of the same layouts, and requires
// every output to agree in definedness, sizes, strides and dtype, the meta one to
// be on meta, and an output that is an input on CPU (an alias) to be the same
// input on meta.
void require_meta_matches_cpu(const OpFn& f, const Tensors& cpu_inputs) {
  const Tensors meta_inputs = to_meta(cpu_inputs);
  const Tensors cpu = f(cpu_inputs);
  const Tensors meta = f(meta_inputs);
  REQUIRE(meta.size() == cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    INFO("output " << i);
    REQUIRE(meta[i].defined() == cpu[i].defined());
    if (!cpu[i].defined()) continue;
    REQUIRE(cpu[i].is_cpu());
    REQUIRE(meta[i].is_meta());
    REQUIRE(meta[i].sizes() == cpu[i].sizes());
    REQUIRE(meta[i].strides() == cpu[i].strides());
    REQUIRE(meta[i].scalar_type() == cpu[i].scalar_type());
    for (size_t j = 0; j < cpu_inputs.size(); ++j) {
      INFO("input " << j);
      REQUIRE(meta[i].is_same(meta_inputs[j]) == cpu[i].is_same(cpu_inputs[j]));
    }
  }
}

struct OpCase {
  std::string name;
  OpFn f;
  Tensors inputs;  // CPU tensors
};

std::optional<at::Tensor> opt(const at::Tensor& b) {
  return b.defined() ? std::optional<at::Tensor>(b) : std::nullopt;
}

// Every op of ops.h, forward and backward, on inputs in `dtype`: contiguous,
// transposed, sliced (not dense) and empty where the op takes any layout.
std::vector<OpCase> op_cases(at::ScalarType dtype) {
  namespace ops = kiln::ops;
  const auto o = at::TensorOptions().dtype(dtype);
  const auto r = [&](at::IntArrayRef sizes) { return at::randn(sizes, o); };
  std::vector<OpCase> cases;
  const std::vector<std::pair<std::string, at::Tensor>> layouts = {
      {"contiguous", r({3, 4, 5})}, {"transposed", r({5, 7}).t()},
      {"sliced", r({4, 10}).slice(1, 0, 10, 2)}, {"empty", r({0, 3})}};
  for (const auto& [layout, x] : layouts) {
    const auto g = r(x.sizes());
    const auto add = [&](const std::string& name, OpFn f, Tensors in) {
      cases.push_back({name + " (" + layout + ")", std::move(f), std::move(in)});
    };
    add("cast", [dtype](const Tensors& t) {
          return Tensors{ops::cast(t[0], dtype == at::kFloat ? at::kBFloat16 : at::kFloat)};
        }, {x});
    add("relu", [](const Tensors& t) { return Tensors{ops::relu(t[0])}; }, {x});
    add("relu_backward", [](const Tensors& t) { return Tensors{ops::relu_backward(t[0], t[1])}; },
        {g, x});
    add("sigmoid", [](const Tensors& t) { return Tensors{ops::sigmoid(t[0], 2.0, 0.5)}; }, {x});
    add("sigmoid_backward",
        [](const Tensors& t) {
          return Tensors{ops::sigmoid_backward(t[0], t[1], 2.0, std::nullopt)};
        },
        {g, x});
    add("dropout", [](const Tensors& t) { return Tensors{ops::dropout(t[0], 0.25, 7)}; }, {x});
    add("gelu", [](const Tensors& t) { return Tensors{ops::gelu(t[0])}; }, {x});
    add("gelu_backward", [](const Tensors& t) { return Tensors{ops::gelu_backward(t[0], t[1])}; },
        {g, x});
    add("scaled_add", [](const Tensors& t) { return Tensors{ops::scaled_add(t[0], t[1], 2.0)}; },
        {x, g});
    // The second output is grad itself (the schema's Tensor(a) alias).
    add("scaled_add_backward",
        [](const Tensors& t) {
          auto [gx, gy] = ops::scaled_add_backward(t[0], 2.0);
          return Tensors{gx, gy};
        },
        {g});
    const auto b = r({x.size(-1)});
    add("bias_gelu", [](const Tensors& t) { return Tensors{ops::bias_gelu(t[0], t[1])}; }, {x, b});
    add("bias_gelu_backward",
        [](const Tensors& t) {
          auto [dx, db] = ops::bias_gelu_backward(t[0], t[1], t[2]);
          return Tensors{dx, db};
        },
        {g, x, b});
  }

  // linear: x (B, K), w (N, K), b (N); x also transposed, and B = 0.
  const std::vector<std::pair<std::string, at::Tensor>> xs = {
      {"contiguous", r({6, 4})}, {"transposed", r({4, 6}).t()}, {"empty", r({0, 4})}};
  const auto w = r({3, 4}), b = r({3});
  for (const auto& [layout, x] : xs) {
    const auto grad = r({x.size(0), 3});
    for (const bool bias : {true, false}) {
      const std::string suffix = " (" + layout + (bias ? ", bias)" : ", no bias)");
      const Tensors in = {x, w, bias ? b : at::Tensor()};
      cases.push_back({"linear" + suffix,
                       [](const Tensors& t) { return Tensors{ops::linear(t[0], t[1], opt(t[2]))}; },
                       in});
      cases.push_back({"linear_gelu" + suffix,
                       [](const Tensors& t) {
                         return Tensors{ops::linear_gelu(t[0], t[1], opt(t[2]))};
                       },
                       in});
      cases.push_back({"linear_relu" + suffix,
                       [](const Tensors& t) {
                         return Tensors{ops::linear_relu(t[0], t[1], opt(t[2]))};
                       },
                       in});
      cases.push_back({"linear_gelu_forward" + suffix,
                       [](const Tensors& t) {
                         auto [y, z] = ops::linear_gelu_forward(t[0], t[1], opt(t[2]));
                         return Tensors{y, z};
                       },
                       in});
    }
    for (const std::array<bool, 3> mask : {std::array<bool, 3>{true, true, true},
                                           std::array<bool, 3>{false, true, true},
                                           std::array<bool, 3>{true, false, false}}) {
      cases.push_back({"linear_backward (" + layout + ", mask " + std::to_string(mask[0]) +
                           std::to_string(mask[1]) + std::to_string(mask[2]) + ")",
                       [mask](const Tensors& t) {
                         auto [dx, dw, db] = ops::linear_backward(t[0], t[1], t[2], mask);
                         return Tensors{dx, dw, db};
                       },
                       {grad, x, w}});
    }
  }

  // cross_entropy: logits (B, C), target (B) int64 in [0, C), lse from the CPU forward.
  const std::vector<std::pair<std::string, at::Tensor>> logits_cases = {
      {"contiguous", r({6, 5})}, {"transposed", r({5, 6}).t()}, {"empty", r({0, 5})}};
  for (const auto& [layout, logits] : logits_cases) {
    const auto target = at::randint(5, {logits.size(0)}, at::kLong);
    const auto lse = std::get<1>(ops::cross_entropy_forward(logits, target));
    const std::string suffix = " (" + layout + ")";
    cases.push_back({"cross_entropy" + suffix,
                     [](const Tensors& t) { return Tensors{ops::cross_entropy(t[0], t[1])}; },
                     {logits, target}});
    cases.push_back({"cross_entropy_forward" + suffix,
                     [](const Tensors& t) {
                       auto [loss, l] = ops::cross_entropy_forward(t[0], t[1]);
                       return Tensors{loss, l};
                     },
                     {logits, target}});
    cases.push_back({"cross_entropy_backward" + suffix,
                     [](const Tensors& t) {
                       return Tensors{ops::cross_entropy_backward(t[0], t[1], t[2], t[3])};
                     },
                     {at::ones({}, o), logits, target, lse}});
  }

  cases.push_back({"grad_norm",
                   [](const Tensors& t) { return Tensors{ops::grad_norm(t)}; },
                   {r({3, 4}), r({7}), r({5, 2}).t(), r({0})}});
  // No output to compare: the meta call must run its checks and return.
  cases.push_back({"fused_adamw_",
                   [](const Tensors& t) {
                     ops::fused_adamw_({t[0], t[1]}, {t[2], t[3]}, {t[4], t[5]}, {t[6], t[7]},
                                       1e-3, 0.9, 0.999, 0.01, 1e-8, 3);
                     return Tensors{};
                   },
                   {r({3, 4}), r({5}), r({3, 4}), r({5}), r({3, 4}), r({5}), r({3, 4}).abs(),
                    r({5}).abs()}});
  cases.push_back({"fused_lion_",
                   [](const Tensors& t) {
                     ops::fused_lion_({t[0], t[1]}, {t[2], t[3]}, {t[4], t[5]}, 1e-4, 0.9, 0.99, 0.1);
                     return Tensors{};
                   },
                   {r({3, 4}), r({5}), r({3, 4}), r({5}), r({3, 4}), r({5})}});
  cases.push_back({"fused_sgd_",
                   [](const Tensors& t) {
                     ops::fused_sgd_({t[0], t[1]}, {t[2], t[3]}, {t[4], t[5]}, 0.1, 0.9, 0.0, 1e-4,
                                     true, false);
                     ops::fused_sgd_({t[0], t[1]}, {t[2], t[3]}, {}, 0.1, 0.0, 0.0, 0.0, false, false);
                     return Tensors{};
                   },
                   {r({3, 4}), r({5}), r({3, 4}), r({5}), r({3, 4}), r({5})}});
  return cases;
}

// One bad argument per op (and a few for the ops with many checks); every one is
// refused by the CPU kernel's checks. The inputs are CPU float32 tensors.
std::vector<OpCase> error_cases() {
  namespace ops = kiln::ops;
  const auto r = [](at::IntArrayRef sizes, at::ScalarType dtype = at::kFloat) {
    return at::randn(sizes, at::TensorOptions().dtype(dtype));
  };
  const auto adamw = [](int64_t step) {
    return [step](const Tensors& t) {
      ops::fused_adamw_({t[0], t[1]}, {t[2], t[3]}, {t[4], t[5]}, {t[6], t[7]}, 1e-3, 0.9, 0.999,
                        0.0, 1e-8, step);
      return Tensors{};
    };
  };
  const auto logits = r({6, 5});
  const auto target = at::randint(5, {6}, at::kLong);
  const auto lse = r({6});
  const OpFn ce_backward = [](const Tensors& t) {
    return Tensors{ops::cross_entropy_backward(t[0], t[1], t[2], t[3])};
  };
  return {
      {"cast: x of dtype Int", [](const Tensors& t) { return Tensors{ops::cast(t[0], at::kFloat)}; },
       {at::ones({3}, at::kInt)}},
      {"cast: dtype Long", [](const Tensors& t) { return Tensors{ops::cast(t[0], at::kLong)}; }, {r({3})}},
      {"relu: x of dtype Int", [](const Tensors& t) { return Tensors{ops::relu(t[0])}; },
       {at::ones({3}, at::kInt)}},
      {"relu_backward: y of another shape",
       [](const Tensors& t) { return Tensors{ops::relu_backward(t[0], t[1])}; }, {r({3}), r({4})}},
      {"dropout: p > 1", [](const Tensors& t) { return Tensors{ops::dropout(t[0], 1.5, 7)}; }, {r({3})}},
      {"sigmoid: grad_clip < 0",
       [](const Tensors& t) { return Tensors{ops::sigmoid(t[0], 1.0, -1.0)}; }, {r({3})}},
      {"sigmoid_backward: s of another dtype",
       [](const Tensors& t) {
         return Tensors{ops::sigmoid_backward(t[0], t[1], 1.0, std::nullopt)};
       },
       {r({3}), r({3}, at::kDouble)}},
      {"gelu: x of dtype Long", [](const Tensors& t) { return Tensors{ops::gelu(t[0])}; },
       {at::ones({3}, at::kLong)}},
      {"gelu_backward: x of another shape",
       [](const Tensors& t) { return Tensors{ops::gelu_backward(t[0], t[1])}; },
       {r({2, 3}), r({3, 2})}},
      {"bias_gelu: b of another length",
       [](const Tensors& t) { return Tensors{ops::bias_gelu(t[0], t[1])}; }, {r({2, 5}), r({4})}},
      {"bias_gelu_backward: grad of another shape",
       [](const Tensors& t) {
         return Tensors{std::get<0>(ops::bias_gelu_backward(t[0], t[1], t[2]))};
       },
       {r({3, 5}), r({2, 5}), r({5})}},
      {"scaled_add: y of another shape",
       [](const Tensors& t) { return Tensors{ops::scaled_add(t[0], t[1], 1.0)}; },
       {r({3}), r({4})}},
      {"scaled_add_backward: grad of dtype Int",
       [](const Tensors& t) { return Tensors{std::get<0>(ops::scaled_add_backward(t[0], 1.0))}; },
       {at::ones({3}, at::kInt)}},
      {"linear: w of another K",
       [](const Tensors& t) { return Tensors{ops::linear(t[0], t[1], std::nullopt)}; },
       {r({6, 4}), r({3, 5})}},
      {"linear_gelu: b of another N",
       [](const Tensors& t) { return Tensors{ops::linear_gelu(t[0], t[1], t[2])}; },
       {r({6, 4}), r({3, 4}), r({4})}},
      {"linear_relu: w of another K",
       [](const Tensors& t) { return Tensors{ops::linear_relu(t[0], t[1], t[2])}; },
       {r({6, 4}), r({3, 5}), r({3})}},
      {"linear_gelu_forward: x 3-D",
       [](const Tensors& t) {
         return Tensors{std::get<0>(ops::linear_gelu_forward(t[0], t[1], t[2]))};
       },
       {r({2, 6, 4}), r({3, 4}), r({3})}},
      {"linear_backward: grad of another N",
       [](const Tensors& t) {
         return Tensors{std::get<1>(ops::linear_backward(t[0], t[1], t[2]))};
       },
       {r({6, 4}), r({6, 4}), r({3, 4})}},
      {"cross_entropy: target of dtype Int",
       [](const Tensors& t) { return Tensors{ops::cross_entropy(t[0], t[1])}; },
       {logits, target.to(at::kInt)}},
      {"cross_entropy_forward: target of another length",
       [](const Tensors& t) {
         return Tensors{std::get<0>(ops::cross_entropy_forward(t[0], t[1]))};
       },
       {logits, target.slice(0, 0, 5)}},
      {"cross_entropy_backward: lse of dtype Half", ce_backward,
       {r({}), logits, target, lse.to(at::kHalf)}},
      {"cross_entropy_backward: grad of two elements", ce_backward, {r({2}), logits, target, lse}},
      {"fused_adamw_: exp_avg_sqs[1] of another shape", adamw(1),
       {r({3}), r({4}), r({3}), r({4}), r({3}), r({4}), r({3}), r({5})}},
      {"fused_adamw_: params[1] of another dtype", adamw(1),
       {r({3}), r({4}, at::kDouble), r({3}), r({4}, at::kDouble), r({3}), r({4}, at::kDouble),
        r({3}), r({4}, at::kDouble)}},
      {"fused_adamw_: step 0", adamw(0),
       {r({3}), r({4}), r({3}), r({4}), r({3}), r({4}), r({3}), r({4})}},
      {"fused_adamw_: lists of two lengths",
       [](const Tensors& t) {
         ops::fused_adamw_({t[0], t[1]}, {t[2]}, {t[3], t[4]}, {t[5], t[6]}, 1e-3, 0.9, 0.999, 0.0,
                           1e-8, 1);
         return Tensors{};
       },
       {r({3}), r({4}), r({3}), r({3}), r({4}), r({3}), r({4})}},
      {"fused_lion_: exp_avgs[1] of another shape",
       [](const Tensors& t) {
         ops::fused_lion_({t[0], t[1]}, {t[2], t[3]}, {t[4], t[5]}, 1e-4, 0.9, 0.99, 0.0);
         return Tensors{};
       },
       {r({3}), r({4}), r({3}), r({4}), r({3}), r({5})}},
      {"fused_lion_: beta2 1",
       [](const Tensors& t) {
         ops::fused_lion_({t[0]}, {t[1]}, {t[2]}, 1e-4, 0.9, 1.0, 0.0);
         return Tensors{};
       },
       {r({3}), r({3}), r({3})}},
      {"fused_sgd_: momentum_buffers with momentum 0",
       [](const Tensors& t) {
         ops::fused_sgd_({t[0]}, {t[1]}, {t[2]}, 0.1, 0.0, 0.0, 0.0, false, false);
         return Tensors{};
       },
       {r({3}), r({3}), r({3})}},
      {"fused_sgd_: grads[0] of another dtype",
       [](const Tensors& t) {
         ops::fused_sgd_({t[0]}, {t[1]}, {t[2]}, 0.1, 0.9, 0.0, 0.0, false, true);
         return Tensors{};
       },
       {r({3}), r({3}, at::kDouble), r({3})}},
      // (grad_norm's message for a second dtype names the device: it is in the mix test below.)
      {"grad_norm: tensors[0] of dtype Int",
       [](const Tensors& t) { return Tensors{ops::grad_norm(t)}; },
       {at::ones({3}, at::kInt), r({3})}},
  };
}

}  // namespace

TEST_CASE("every kiln op has a Meta kernel (cross_entropy through its composite)", "[meta]") {
  auto& dispatcher = c10::Dispatcher::singleton();
  int ops = 0;
  for (const auto& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("kiln::", 0) != 0) continue;
    ++ops;
    INFO(name.name);
    const auto op = dispatcher.findSchemaOrThrow(name.name.c_str(), name.overload_name.c_str());
    REQUIRE((op.hasKernelForDispatchKey(c10::DispatchKey::Meta) ||
             op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)));
  }
  REQUIRE(ops >= 21);  // the schemas of ops.cpp: the loop saw them
}

TEST_CASE("on meta tensors every op's outputs have the CPU outputs' sizes, strides and dtype",
          "[meta]") {
  for (const auto dtype : kDtypes) {
    for (const auto& c : op_cases(dtype)) {
      INFO(c.name << ", dtype " << dtype);
      require_meta_matches_cpu(c.f, c.inputs);
    }
  }
}

TEST_CASE("on meta tensors every op refuses bad arguments with the CPU kernel's message",
          "[meta]") {
  for (const auto& c : error_cases()) {
    INFO(c.name);
    const auto meta_inputs = to_meta(c.inputs);
    const auto on_cpu = error_of([&] { c.f(c.inputs); });
    const auto on_meta = error_of([&] { c.f(meta_inputs); });
    REQUIRE(!on_cpu.empty());
    REQUIRE(on_meta == on_cpu);
  }
}

TEST_CASE("an op refuses a mix of meta and CPU tensors, naming the argument", "[meta]") {
  namespace ops = kiln::ops;
  const auto m = [](at::IntArrayRef sizes) { return at::empty(sizes, at::device(at::kMeta)); };
  const auto c = [](at::IntArrayRef sizes) { return at::zeros(sizes); };
  const auto target = at::zeros({6}, at::kLong);
  // The dispatcher picks the Meta kernel whichever argument is on meta.
  CHECK(error_of([&] { ops::relu_backward(m({3}), c({3})); }) ==
        "kiln::relu_backward: y: expected device meta (the device of grad), got cpu");
  CHECK(error_of([&] { ops::sigmoid_backward(c({3}), m({3}), 1.0, std::nullopt); }) ==
        "kiln::sigmoid_backward: s: expected device cpu (the device of grad), got meta");
  CHECK(error_of([&] { ops::gelu_backward(m({3}), c({3})); }) ==
        "kiln::gelu_backward: x: expected device meta (the device of grad), got cpu");
  CHECK(error_of([&] { ops::bias_gelu(m({2, 5}), c({5})); }) ==
        "kiln::bias_gelu: b: expected device meta (the device of x), got cpu");
  CHECK(error_of([&] { ops::scaled_add(c({3}), m({3}), 1.0); }) ==
        "kiln::scaled_add: y: expected device cpu (the device of x), got meta");
  CHECK(error_of([&] { ops::linear(c({6, 4}), m({3, 4}), c({3})); }) ==
        "kiln::linear: w: expected device cpu (the device of x), got meta");
  CHECK(error_of([&] { ops::linear_backward(c({6, 3}), m({6, 4}), m({3, 4})); }) ==
        "kiln::linear_backward: grad: expected device meta (the device of x), got cpu");
  CHECK(error_of([&] { ops::cross_entropy_forward(m({6, 5}), target); }) ==
        "kiln::cross_entropy_forward: target: expected device meta (the device of logits), "
        "got cpu");
  const auto meta_target = target.to(at::kMeta);
  CHECK(error_of([&] { ops::cross_entropy_backward(c({}), m({6, 5}), meta_target, m({6})); }) ==
        "kiln::cross_entropy_backward: grad: expected device meta (the device of logits), got cpu");
  CHECK(error_of([&] { ops::fused_adamw_({m({3}), c({4})}, {m({3}), c({4})}, {m({3}), c({4})},
                                         {m({3}), c({4})}, 1e-3, 0.9, 0.999, 0.0, 1e-8, 1); }) ==
        "kiln::fused_adamw_: params[1]: expected device meta (the device of params[0]), got cpu");
  CHECK(error_of([&] { ops::fused_adamw_({m({3})}, {m({3})}, {c({3})}, {m({3})}, 1e-3, 0.9, 0.999,
                                         0.0, 1e-8, 1); }) ==
        "kiln::fused_adamw_: exp_avgs[0]: expected device meta (the device of params[0]), got cpu");
  CHECK(error_of([&] { ops::grad_norm({m({3}), c({3})}); }) ==
        "kiln::grad_norm: tensors[1]: expected Float on meta (as tensors[0]), got Float on cpu");
}

TEST_CASE("on meta, cross_entropy checks target's shape, dtype and device but not its values",
          "[meta]") {
  // The range check reads the class indices; a meta tensor has none, so the Meta
  // kernels skip that one check (and only that one).
  const auto logits = at::randn({4, 3});
  const auto target = at::tensor({0, 1, 7, 2}, at::kLong);
  REQUIRE_THROWS_WITH(kiln::ops::cross_entropy(logits, target),
                      Catch::Contains("got target[2] = 7"));
  const auto loss = kiln::ops::cross_entropy(to_meta(logits), to_meta(target));
  REQUIRE(loss.is_meta());
  REQUIRE(loss.dim() == 0);
}

TEST_CASE("autograd runs on meta tensors: linear's, linear_gelu's and linear_relu's grads are meta "
          "tensors of their inputs' shapes",
          "[meta][autograd]") {
  const c10::AutoGradMode grad_on(true);
  for (const auto dtype : {at::kFloat, at::kHalf}) {
    for (const int fused : {0, 1, 2}) {  // none, gelu, relu
      INFO("dtype " << dtype << ", fused activation " << fused << " (none, gelu, relu)");
      const auto o = at::TensorOptions().dtype(dtype).device(at::kMeta);
      const auto x = at::empty({6, 4}, o).requires_grad_();
      const auto w = at::empty({3, 4}, o).requires_grad_();
      const auto b = at::empty({3}, o).requires_grad_();
      const auto y = fused == 1   ? kiln::ops::linear_gelu(x, w, b)
                     : fused == 2 ? kiln::ops::linear_relu(x, w, b)
                                  : kiln::ops::linear(x, w, b);
      REQUIRE(y.requires_grad());
      y.sum().backward();
      for (const auto& t : {x, w, b}) {
        REQUIRE(t.grad().defined());
        REQUIRE(t.grad().is_meta());
        REQUIRE(t.grad().sizes() == t.sizes());
        REQUIRE(t.grad().scalar_type() == dtype);
      }
    }
  }
}

TEST_CASE("a whole Mlp runs forward and backward on meta at a batch no memory could hold",
          "[meta][nn]") {
  kiln::nn::Mlp model(kiln::nn::MlpOptions(784, {512, 256}, 10));
  model->to(at::kMeta);
  for (const auto& p : model->parameters()) REQUIRE(p.is_meta());
  // 2^40 images: 3.4 PB of input and 2.2 PB of first-layer activations, far past
  // any allocator, so a kernel that allocated real memory would throw.
  const int64_t batch = int64_t{1} << 40;
  const auto x = at::empty({batch, 1, 28, 28}, at::device(at::kMeta));
  const c10::AutoGradMode grad_on(true);
  const auto logits = model->forward(x);
  REQUIRE(logits.is_meta());
  REQUIRE(logits.sizes().vec() == std::vector<int64_t>{batch, 10});
  REQUIRE(logits.scalar_type() == at::kFloat);
  REQUIRE(logits.requires_grad());

  const auto target = at::empty({batch}, at::device(at::kMeta).dtype(at::kLong));
  kiln::ops::cross_entropy(logits, target).backward();
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  for (const auto& p : model->parameters()) {
    REQUIRE(p.grad().is_meta());
    REQUIRE(p.grad().sizes() == p.sizes());
    params.push_back(p), grads.push_back(p.grad());
    exp_avgs.push_back(at::empty_like(p)), exp_avg_sqs.push_back(at::empty_like(p));
  }
  // The optimizer step's checks pass on meta, too.
  const c10::NoGradGuard no_grad;
  kiln::ops::fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, 1e-3, 0.9, 0.999, 0.01, 1e-8, 1);
}
