// The fake accelerator (tests/fake_device.h): tensors go to fake:0 and back unchanged,
// a CPU tensor in an op on fake:0 is CUDA's "same device" error naming the op, autocast
// there follows CUDA's policy, and kiln's ops, a training run and saving agree with the
// CPU bit for bit (the same CPU kernels run underneath: any difference is a device bug).
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <map>

#include "fake_device.h"
#include "nn/mlp.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "support.h"
#include "util/safetensors.h"

using Catch::Matchers::Contains;
using kiln::test::fake_device;

namespace {

at::Tensor on_fake(const at::Tensor& t) { return t.to(fake_device()); }

// `actual` is on fake:0 and equals the CPU's `expected` exactly.
void require_fake_equals(const at::Tensor& actual, const at::Tensor& expected) {
  REQUIRE(actual.device() == fake_device());
  REQUIRE(actual.scalar_type() == expected.scalar_type());
  KILN_REQUIRE_CLOSE(actual.cpu(), expected, 0.0, 0.0);
}

}  // namespace

TEST_CASE("fake: tensors go to fake:0 and back unchanged", "[fake]") {
  const auto fake = fake_device();
  REQUIRE(fake.str() == "fake:0");
  REQUIRE(c10::Device("fake:0") == fake);
  at::manual_seed(0);
  for (const auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kLong}) {
    INFO(dtype);
    const auto x = dtype == at::kLong ? at::randint(-1000, 1000, {3, 5}, at::kLong)
                                      : at::randn({3, 5}).to(dtype);
    const auto y = x.to(fake);
    std::ostringstream printed;
    printed << y.device();
    REQUIRE(printed.str() == "fake:0");
    REQUIRE(y.is_privateuseone());
    REQUIRE(y.scalar_type() == dtype);
    const auto back = y.cpu();
    REQUIRE(back.is_cpu());
    REQUIRE(at::equal(back, x));
    // fake → fake copies, and a strided view crossing over
    REQUIRE(at::equal(y.clone().cpu(), x));
    REQUIRE(at::equal(y.t().cpu(), x.t()));
    REQUIRE(at::equal(x.t().to(fake).cpu(), x.t()));
  }
  const auto none = at::empty({0, 3}).to(fake);  // no memory at all
  REQUIRE(none.device() == fake);
  REQUIRE(none.cpu().sizes() == at::IntArrayRef({0, 3}));
  REQUIRE(std::get<1>(kiln::ops::scaled_add_backward(none, 2.0)).is_alias_of(none));
}

TEST_CASE("fake: a CPU tensor in an op on fake:0 is an error naming the op", "[fake]") {
  const auto fake = fake_device();
  at::manual_seed(0);
  const auto x = at::randn({4, 3}).to(fake);
  const auto index = at::tensor({0, 2}, at::kLong);
  REQUIRE_THROWS_AS(at::index_select(x, 0, index), c10::Error);
  REQUIRE_THROWS_WITH(at::index_select(x, 0, index),
                      Contains("same device") && Contains("fake:0 and cpu") &&
                          Contains("index_select"));
  REQUIRE(at::equal(at::index_select(x, 0, index.to(fake)).cpu(),
                    at::index_select(x.cpu(), 0, index)));

  const auto w = at::randn({5, 3}), b = at::randn({5});
  // at::linear is composite: the backend op it reaches names the error, on CUDA too.
  REQUIRE_THROWS_WITH(at::linear(x, w, on_fake(b)), Contains("same device") && Contains("addmm"));
  REQUIRE_THROWS_WITH(kiln::ops::linear(x, w, on_fake(b)),
                      Contains("same device") && Contains("kiln::linear"));
  REQUIRE_THROWS_WITH(kiln::ops::linear(x, on_fake(w), b),  // an optional tensor argument
                      Contains("same device") && Contains("kiln::linear"));
  REQUIRE_THROWS_WITH(kiln::ops::grad_norm({x, at::ones({2})}),  // a tensor list
                      Contains("same device") && Contains("kiln::grad_norm"));
  REQUIRE_THROWS_WITH(at::zeros({4, 3}).add_(x), Contains("same device") && Contains("add_"));

  SECTION("a 0-dim CPU tensor is a scalar, and the result stays on fake:0") {
    const auto two = at::scalar_tensor(2.0);
    require_fake_equals(x * two, x.cpu() * two);
    require_fake_equals(two * x, two * x.cpu());
  }
  SECTION("CPU indices are allowed in advanced indexing, as on CUDA") {
    using torch::indexing::TensorIndex;
    require_fake_equals(x.index({TensorIndex(index)}), x.cpu().index({TensorIndex(index)}));
  }
}

TEST_CASE("fake: kiln's ops on fake:0 equal the CPU's", "[fake]") {
  at::manual_seed(0);
  const auto x = at::randn({6, 5}), y = at::randn({6, 5}), b5 = at::randn({5});
  const auto w = at::randn({4, 5}), b = at::randn({4});
  require_fake_equals(kiln::ops::relu(on_fake(x)), kiln::ops::relu(x));
  require_fake_equals(kiln::ops::gelu(on_fake(x)), kiln::ops::gelu(x));
  require_fake_equals(kiln::ops::sigmoid(on_fake(x), 2.0, 0.1), kiln::ops::sigmoid(x, 2.0, 0.1));
  require_fake_equals(kiln::ops::bias_gelu(on_fake(x), on_fake(b5)), kiln::ops::bias_gelu(x, b5));
  require_fake_equals(kiln::ops::scaled_add(on_fake(x), on_fake(y), 0.5),
                      kiln::ops::scaled_add(x, y, 0.5));
  require_fake_equals(kiln::ops::linear(on_fake(x), on_fake(w), on_fake(b)),
                      kiln::ops::linear(x, w, b));
  require_fake_equals(kiln::ops::grad_norm({on_fake(x), on_fake(w)}), kiln::ops::grad_norm({x, w}));
  // scaled_add_backward hands back its grad as dy, a view (its schema's Tensor(a)),
  // on fake:0 as on the CPU, not a copy.
  const auto g = on_fake(y);
  const auto [dx, dy] = kiln::ops::scaled_add_backward(g, 0.5);
  require_fake_equals(dx, std::get<0>(kiln::ops::scaled_add_backward(y, 0.5)));
  REQUIRE(std::get<1>(kiln::ops::scaled_add_backward(y, 0.5)).is_alias_of(y));
  REQUIRE(dy.is_alias_of(g));
}

TEST_CASE("fake: gradients through kiln's ops on fake:0 equal the CPU's", "[fake]") {
  at::manual_seed(0);
  const std::vector<at::Tensor> inputs = {at::randn({6, 5}), at::randn({4, 5}), at::randn({4}),
                                          at::randn({4})};
  const auto target = at::randint(0, 4, {6}, at::kLong);
  // z = relu(x·wᵀ + b); loss = cross_entropy(sigmoid(0.5·gelu(z) + bias_gelu(z, c)), target):
  // the loss and the leaves' gradients, computed on `device`.
  const auto run = [&](const at::Device& device) {
    std::vector<at::Tensor> leaves;
    for (const auto& t : inputs) leaves.push_back(t.clone().to(device).requires_grad_());
    const auto &x = leaves[0], &w = leaves[1], &b = leaves[2], &c = leaves[3];
    const auto z = kiln::ops::relu(kiln::ops::linear(x, w, b));
    const auto h = kiln::ops::scaled_add(kiln::ops::gelu(z), kiln::ops::bias_gelu(z, c), 0.5);
    const auto loss = kiln::ops::cross_entropy(kiln::ops::sigmoid(h, 1.5), target.to(device));
    loss.backward();
    std::vector<at::Tensor> out = {loss};
    for (const auto& leaf : leaves) out.push_back(leaf.grad());
    return out;
  };
  const auto cpu = run(at::kCPU), fake = run(fake_device());
  for (size_t i = 0; i < cpu.size(); ++i) {
    INFO("output " << i << " (0 the loss, then the gradients of x, w, b, c)");
    require_fake_equals(fake[i], cpu[i]);
  }
}

TEST_CASE("fake: fused_adamw_ updates the fake tensors in place", "[fake]") {
  at::manual_seed(0);
  std::vector<std::vector<at::Tensor>> cpu(4), fake(4);  // params, grads, exp_avgs, exp_avg_sqs
  for (const auto& shape : {std::vector<int64_t>{3, 4}, std::vector<int64_t>{5}}) {
    for (size_t k = 0; k < 4; ++k) {
      cpu[k].push_back(k == 3 ? at::rand(shape) : at::randn(shape));
      fake[k].push_back(on_fake(cpu[k].back()));
    }
  }
  const auto before = fake[0][0].cpu();
  const auto* storage = fake[0][0].data_ptr();
  for (auto* lists : {&cpu, &fake})
    kiln::ops::fused_adamw_((*lists)[0], (*lists)[1], (*lists)[2], (*lists)[3], 1e-2, 0.9, 0.999,
                            1e-2, 1e-8, 3);
  REQUIRE_FALSE(at::equal(fake[0][0].cpu(), before));  // the update reached the fake tensor
  REQUIRE(fake[0][0].data_ptr() == storage);
  for (size_t k = 0; k < 4; ++k)
    for (size_t i = 0; i < cpu[k].size(); ++i) {
      INFO("list " << k << " (params, grads, exp_avgs, exp_avg_sqs), tensor " << i);
      require_fake_equals(fake[k][i], cpu[k][i]);
    }
}

TEST_CASE("fake: autocast on fake:0 follows CUDA's policy for ATen's ops", "[fake]") {
  constexpr auto kFake = c10::DeviceType::PrivateUse1;
  struct RestoreAutocast {
    bool enabled = at::autocast::is_autocast_enabled(kFake);
    at::ScalarType dtype = at::autocast::get_autocast_dtype(kFake);
    ~RestoreAutocast() {
      at::autocast::set_autocast_enabled(kFake, enabled);
      at::autocast::set_autocast_dtype(kFake, dtype);
      at::autocast::clear_cache();
    }
  } restore;
  at::manual_seed(0);
  const auto x = at::randn({4, 3}), w = at::randn({5, 3}), b = at::randn({5});
  at::autocast::set_autocast_dtype(kFake, at::kBFloat16);
  at::autocast::set_autocast_enabled(kFake, true);
  const auto y = at::linear(on_fake(x), on_fake(w), on_fake(b));  // lower precision
  const auto bf16 = [](const at::Tensor& t) { return t.to(at::kBFloat16); };
  require_fake_equals(y, at::linear(bf16(x), bf16(w), bf16(b)));
  REQUIRE(at::exp(y).scalar_type() == at::kFloat);                  // fp32
  REQUIRE(at::log_softmax(y, 1).scalar_type() == at::kFloat);       // fp32, dtype set
  at::autocast::set_autocast_enabled(kFake, false);
  REQUIRE(at::linear(on_fake(x), on_fake(w), on_fake(b)).scalar_type() == at::kFloat);
}

namespace {

// Three AdamW steps on (x, target) with kiln's cross-entropy; the losses.
std::vector<double> train_three_steps(kiln::nn::Mlp& net, const at::Tensor& x,
                                      const at::Tensor& target) {
  const auto device = net->parameters().front().device();
  kiln::optim::AdamW optimizer(net->parameters(), kiln::optim::AdamWOptions(1e-2));
  std::vector<double> losses;
  for (int step = 0; step < 3; ++step) {
    optimizer.zero_grad();
    const auto loss = kiln::ops::cross_entropy(net->forward(x.to(device)), target.to(device));
    REQUIRE(loss.device() == device);
    loss.backward();
    optimizer.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

}  // namespace

TEST_CASE("fake: an Mlp trained on fake:0 matches the CPU step for step", "[fake]") {
  torch::manual_seed(0);
  kiln::nn::Mlp cpu_net(kiln::nn::MlpOptions(12, {16, 8}, 5));
  kiln::nn::Mlp fake_net(std::dynamic_pointer_cast<kiln::nn::MlpImpl>(cpu_net->clone()));
  fake_net->to(fake_device());
  const auto x = torch::randn({8, 12});
  const auto target = torch::randint(0, 5, {8}, at::kLong);

  const auto cpu_losses = train_three_steps(cpu_net, x, target);
  const auto fake_losses = train_three_steps(fake_net, x, target);
  REQUIRE(fake_losses == cpu_losses);
  REQUIRE(cpu_losses.back() < cpu_losses.front());  // it did train

  const auto cpu_params = cpu_net->named_parameters();
  for (const auto& p : fake_net->named_parameters()) {
    INFO(p.key());
    require_fake_equals(p.value(), cpu_params[p.key()]);
  }
}

TEST_CASE("fake: a model on fake:0 saves as torch and safetensors files", "[fake]") {
  kiln::test::TempDir dir;
  const auto options = kiln::nn::MlpOptions(6, {4}, 3);
  torch::manual_seed(0);
  kiln::nn::Mlp net(options);
  std::map<std::string, at::Tensor> expected;
  for (const auto& p : net->named_parameters()) expected[p.key()] = p.value().detach().clone();
  net->to(fake_device());

  torch::save(net, dir / "model.pt");
  kiln::nn::Mlp on_cpu(options), on_fake(options);  // other initial values
  torch::load(on_cpu, dir / "model.pt", torch::kCPU);
  on_fake->to(fake_device());
  torch::load(on_fake, dir / "model.pt");
  for (const auto& p : on_cpu->named_parameters()) {
    INFO(p.key());
    REQUIRE(p.value().is_cpu());
    REQUIRE(at::equal(p.value(), expected.at(p.key())));
    require_fake_equals(on_fake->named_parameters()[p.key()], expected.at(p.key()));
  }

  kiln::safetensors::NamedTensors tensors;
  for (const auto& p : net->named_parameters()) tensors.emplace_back(p.key(), p.value());
  kiln::safetensors::save_file(dir / "model.safetensors", tensors);
  const auto contents = kiln::safetensors::load_file(dir / "model.safetensors");
  REQUIRE(contents.tensors.size() == expected.size());
  for (const auto& [name, t] : contents.tensors) {
    INFO(name);
    REQUIRE(t.is_cpu());
    REQUIRE(at::equal(t, expected.at(name)));
  }
}
