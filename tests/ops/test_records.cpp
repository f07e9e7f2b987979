// Every op's Autograd kernel records a graph node exactly when autograd needs one:
// grad mode on and an input that requires grad (autograd_support.h, records()).
#include <torch/torch.h>

#include <functional>

#include "ops/ops.h"

namespace {

struct Call {
  const char* name;
  // Runs the op on inputs that all do (true) or all do not (false) require grad.
  std::function<std::vector<at::Tensor>(bool)> run;
};

at::Tensor input(std::vector<int64_t> shape, bool grad) {
  return at::randn(shape).requires_grad_(grad);
}

std::vector<Call> calls() {
  namespace k = kiln::ops;
  return {
      {"cast", [](bool g) { return std::vector{k::cast(input({64}, g), at::kBFloat16)}; }},
      {"relu", [](bool g) { return std::vector{k::relu(input({64}, g))}; }},
      {"relu_backward", [](bool g) { return std::vector{k::relu_backward(input({64}, g), input({64}, g))}; }},
      {"sigmoid", [](bool g) { return std::vector{k::sigmoid(input({64}, g), 2.0, 0.5)}; }},
      {"sigmoid_backward",
       [](bool g) { return std::vector{k::sigmoid_backward(input({64}, g), input({64}, g), 2.0, std::nullopt)}; }},
      {"dropout", [](bool g) { return std::vector{k::dropout(input({64}, g), 0.5, 3)}; }},
      {"gelu", [](bool g) { return std::vector{k::gelu(input({64}, g))}; }},
      {"gelu_backward", [](bool g) { return std::vector{k::gelu_backward(input({64}, g), input({64}, g))}; }},
      {"bias_gelu", [](bool g) { return std::vector{k::bias_gelu(input({4, 16}, g), input({16}, g))}; }},
      {"bias_gelu_backward",
       [](bool g) {
         auto [dx, db] = k::bias_gelu_backward(input({4, 16}, g), input({4, 16}, g), input({16}, g));
         return std::vector{dx, db};
       }},
      {"scaled_add", [](bool g) { return std::vector{k::scaled_add(input({64}, g), input({64}, g), 2.0)}; }},
      {"scaled_add_backward",
       [](bool g) {
         // dy is grad itself (the schema's alias), which keeps grad's requires_grad.
         return std::vector{std::get<0>(k::scaled_add_backward(input({64}, g), 2.0))};
       }},
      {"linear", [](bool g) { return std::vector{k::linear(input({4, 8}, g), input({3, 8}, g), input({3}, g))}; }},
      {"linear_backward",
       [](bool g) {
         auto [dx, dw, db] = k::linear_backward(input({4, 3}, g), input({4, 8}, g), input({3, 8}, g));
         return std::vector{dx, dw, db};
       }},
  };
}

}  // namespace

TEST_CASE("ops record a graph node only when an input requires grad", "[ops][autograd]") {
  for (const auto& call : calls()) {
    INFO(call.name);
    for (const auto& out : call.run(true)) REQUIRE(out.requires_grad());
    for (const auto& out : call.run(false)) {
      REQUIRE_FALSE(out.requires_grad());
      REQUIRE_FALSE(out.grad_fn());
    }
    torch::NoGradGuard no_grad;
    for (const auto& out : call.run(true)) REQUIRE_FALSE(out.requires_grad());
  }
}
