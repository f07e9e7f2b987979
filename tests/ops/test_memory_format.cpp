// kiln's elementwise ops keep a dense input's layout, as ATen's do: a channels-last
// activation (a ConvNet's) stays channels-last through relu, gelu, sigmoid and
// scaled_add and their gradients, with the values of the contiguous computation; when
// the two inputs of a binary op differ, the output takes one's layout as ATen does (the
// first's for scaled_add, the saved activation's for a backward op).
#include <torch/torch.h>

#include "ops/ops.h"
#include "support.h"

namespace {

const auto kChannelsLast = at::MemoryFormat::ChannelsLast;

at::Tensor channels_last(at::Tensor t) { return t.contiguous(kChannelsLast); }

}  // namespace

TEST_CASE("elementwise ops keep channels-last, forward and backward", "[ops][memory_format]") {
  torch::manual_seed(0);
  const std::vector<std::pair<std::string, std::function<at::Tensor(const at::Tensor&)>>> ops = {
      {"relu", [](const at::Tensor& x) { return kiln::ops::relu(x); }},
      {"gelu", [](const at::Tensor& x) { return kiln::ops::gelu(x); }},
      {"sigmoid", [](const at::Tensor& x) { return kiln::ops::sigmoid(x, 1.5); }},
      {"scaled_add", [](const at::Tensor& x) { return kiln::ops::scaled_add(x, x * 2, 0.5); }},
  };
  for (const auto& [name, op] : ops) {
    INFO(name);
    const auto base = at::randn({4, 6, 5, 3});  // (N, C, H, W)
    auto x = channels_last(base).requires_grad_();
    const auto y = op(x);
    REQUIRE(y.is_contiguous(kChannelsLast));
    REQUIRE_FALSE(y.is_contiguous());
    auto xc = base.clone().requires_grad_();
    const auto yc = op(xc);
    REQUIRE(yc.is_contiguous());
    REQUIRE(at::equal(y, yc));  // the same elements, the same arithmetic
    const auto g = at::randn_like(base);
    y.backward(channels_last(g));
    yc.backward(g);
    REQUIRE(at::equal(x.grad(), xc.grad()));
    // A gradient in the other layout (a reshape's, contiguous): each op takes both,
    // and the input's gradient stays in the activation's layout, as ATen's.
    auto x2 = channels_last(base).requires_grad_();
    op(x2).backward(g);
    REQUIRE(at::equal(x2.grad(), xc.grad()));
    REQUIRE(x2.grad().is_contiguous(kChannelsLast));
  }
  // Inputs of a binary op in different layouts: the first one's, as ATen's add; equal values.
  const auto a = at::randn({2, 3, 4, 5});
  const auto mixed = kiln::ops::scaled_add(channels_last(a), a * 3, 2.0);
  REQUIRE(mixed.is_contiguous(kChannelsLast));
  REQUIRE(at::equal(mixed, kiln::ops::scaled_add(a, a * 3, 2.0)));
  const auto mixed2 = kiln::ops::scaled_add(a * 3, channels_last(a), 2.0);
  REQUIRE(mixed2.is_contiguous());
  REQUIRE(at::equal(mixed2, kiln::ops::scaled_add(a * 3, a, 2.0)));
  // A backward op's output follows its saved activation (the second input), as ATen's threshold_backward.
  const auto g = at::randn({2, 3, 4, 5});
  const auto y = kiln::ops::relu(channels_last(a));
  REQUIRE(kiln::ops::relu_backward(g, y).is_contiguous(kChannelsLast));
  REQUIRE(at::equal(kiln::ops::relu_backward(g, y), kiln::ops::relu_backward(g, y.contiguous())));
  REQUIRE(kiln::ops::relu_backward(channels_last(g), y.contiguous()).is_contiguous());
  // A non-dense view (every other column) is made contiguous first.
  const auto strided = at::randn({6, 8}).slice(1, 0, 8, 2);
  REQUIRE(at::equal(kiln::ops::relu(strided), at::relu(strided)));
}
