// Memory reporting: exact parameter, gradient and optimizer-state bytes of a known
// model (each kiln optimizer reporting its own state), process and heap readings,
// the CPU activation probe, the report's JSON and table, and the CUDA allocator's
// side (skipped without a GPU).
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "nn/mlp.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "optim/lion.h"
#include "optim/muon.h"
#include "optim/sgd.h"
#include "support.h"
#include "train/memory.h"

namespace {

constexpr int64_t kMiB = 1 << 20;

// Mlp(10 → 6 → 3): 6·10 + 6 + 3·6 + 3 = 87 float32 parameters.
constexpr int64_t kToyParamBytes = (6 * 10 + 6 + 3 * 6 + 3) * 4;

void one_step(kiln::nn::Mlp& model, torch::optim::Optimizer& opt) {
  opt.zero_grad();
  model->forward(torch::randn({5, 10})).sum().backward();
  opt.step();
}

// The bytes of every storage behind `opt`'s state_tensors(), summed one by one.
int64_t reported_bytes(const kiln::optim::StateReporter& opt) {
  int64_t bytes = 0;
  for (const auto& t : opt.state_tensors()) bytes += static_cast<int64_t>(t.storage().nbytes());
  return bytes;
}

// An optimizer that does not report its state, and one that does.
struct OddState : torch::optim::OptimizerCloneableParamState<OddState> {
  TORCH_ARG(torch::Tensor, buf);
};
struct OddOptimizer : torch::optim::Optimizer {
  explicit OddOptimizer(std::vector<torch::Tensor> params)
      : Optimizer({torch::optim::OptimizerParamGroup(std::move(params))},
                  std::make_unique<kiln::optim::AdamWOptions>()) {}
  torch::Tensor step(LossClosure) override {
    for (const auto& p : param_groups_[0].params()) {
      auto s = std::make_unique<OddState>();
      s->buf(torch::zeros({2}, p.options()));  // 8 bytes each
      state_[p.unsafeGetTensorImpl()] = std::move(s);
    }
    return {};
  }
};
struct ReportingOddOptimizer : OddOptimizer, kiln::optim::StateReporter {
  using OddOptimizer::OddOptimizer;
  std::vector<at::Tensor> state_tensors() const override {
    std::vector<at::Tensor> out;
    for (const auto& [key, s] : state_) out.push_back(static_cast<const OddState&>(*s).buf());
    return out;
  }
};

}  // namespace

TEST_CASE("model_memory counts parameter, gradient and AdamW state bytes exactly", "[memory]") {
  kiln::nn::Mlp model(kiln::nn::MlpOptions(10, {6}, 3));
  kiln::optim::AdamW opt(model->parameters());
  auto m = kiln::train::model_memory(opt);
  REQUIRE(m.parameter_bytes == kToyParamBytes);
  REQUIRE(m.gradient_bytes == 0);
  REQUIRE(m.optimizer_state_bytes == 0);
  one_step(model, opt);
  m = kiln::train::model_memory(opt);
  REQUIRE(m.parameter_bytes == kToyParamBytes);
  REQUIRE(m.gradient_bytes == kToyParamBytes);
  REQUIRE(m.optimizer_state_bytes == 2 * kToyParamBytes);  // exp_avg and exp_avg_sq
  REQUIRE(m.optimizer_state_bytes == reported_bytes(opt));
  REQUIRE(m.uncounted_optimizer_states == 0);
}

TEST_CASE("each kiln optimizer reports its state: SGD's momentum buffers", "[memory]") {
  kiln::nn::Mlp model(kiln::nn::MlpOptions(10, {6}, 3));
  kiln::optim::SGD sgd(model->parameters(), kiln::optim::SGDOptions(0.1).momentum(0.9));
  one_step(model, sgd);
  const auto m = kiln::train::model_memory(sgd);
  REQUIRE(m.optimizer_state_bytes == kToyParamBytes);  // one buffer per parameter
  REQUIRE(m.optimizer_state_bytes == reported_bytes(sgd));
  REQUIRE(m.uncounted_optimizer_states == 0);
  kiln::optim::SGD plain(model->parameters(), kiln::optim::SGDOptions(0.1));  // momentum 0
  one_step(model, plain);
  REQUIRE(kiln::train::model_memory(plain).optimizer_state_bytes == 0);  // no state at all
}

TEST_CASE("each kiln optimizer reports its state: Lion's moments", "[memory]") {
  kiln::nn::Mlp model(kiln::nn::MlpOptions(10, {6}, 3));
  kiln::optim::Lion lion(model->parameters());
  one_step(model, lion);
  const auto m = kiln::train::model_memory(lion);
  REQUIRE(m.optimizer_state_bytes == kToyParamBytes);  // exp_avg
  REQUIRE(m.optimizer_state_bytes == reported_bytes(lion));
  REQUIRE(m.uncounted_optimizer_states == 0);
}

TEST_CASE("each kiln optimizer reports its state: Muon's momentum and its AdamW's moments",
          "[memory]") {
  kiln::nn::Mlp model(kiln::nn::MlpOptions(10, {6}, 3));
  kiln::optim::Muon muon(kiln::optim::muon_param_groups(model->named_parameters(),
                                                        model->head_parameters()));
  one_step(model, muon);
  const auto m = kiln::train::model_memory(muon);
  // Muon: layers.0.weight (6·10); AdamW, two moments each: layers.0.bias (6) and the
  // head (3·6 + 3).
  REQUIRE(m.optimizer_state_bytes == (6 * 10 + 2 * (6 + 3 * 6 + 3)) * 4);
  REQUIRE(m.optimizer_state_bytes == reported_bytes(muon));
  REQUIRE(m.uncounted_optimizer_states == 0);
}

TEST_CASE("a libtorch optimizer does not report its state: its states are uncounted; views "
          "of one storage count once",
          "[memory]") {
  kiln::nn::Mlp model(kiln::nn::MlpOptions(10, {6}, 3));
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  one_step(model, sgd);
  const auto m = kiln::train::model_memory(sgd);
  REQUIRE(m.optimizer_state_bytes == 0);
  REQUIRE(m.uncounted_optimizer_states == 4);  // 2 weights, 2 biases
  REQUIRE(m.parameter_bytes == kToyParamBytes);

  const auto flat = torch::zeros({100});
  REQUIRE(kiln::train::storage_bytes({flat, flat.slice(0, 0, 10), flat.view({10, 10})}) == 400);
}

TEST_CASE("an optimizer's state is counted once it reports it (StateReporter), uncounted before",
          "[memory]") {
  kiln::nn::Mlp model(kiln::nn::MlpOptions(10, {6}, 3));
  OddOptimizer odd(model->parameters());
  odd.step(nullptr);
  auto m = kiln::train::model_memory(odd);
  REQUIRE(m.uncounted_optimizer_states == 4);  // 2 weights, 2 biases
  REQUIRE(m.optimizer_state_bytes == 0);
  ReportingOddOptimizer reporting(model->parameters());
  reporting.step(nullptr);
  m = kiln::train::model_memory(reporting);
  REQUIRE(m.uncounted_optimizer_states == 0);
  REQUIRE(m.optimizer_state_bytes == 4 * 8);
}

TEST_CASE("process memory: resident bytes are positive and the peak is at least the current",
          "[memory]") {
  const auto m = kiln::train::process_memory();
  REQUIRE(m.rss_bytes > 0);
  REQUIRE(m.peak_rss_bytes >= m.rss_bytes);
}

TEST_CASE("heap_bytes_in_use sees a 64 MiB tensor come and go", "[memory]") {
  const int64_t before = kiln::train::heap_bytes_in_use();
  auto t = torch::empty({16 * kMiB}, at::kFloat);  // 64 MiB
  const int64_t during = kiln::train::heap_bytes_in_use();
  t.reset();
  const int64_t after = kiln::train::heap_bytes_in_use();
  INFO("before " << before << ", with the tensor " << during << ", after " << after);
  REQUIRE(during - before >= 64 * kMiB);
  REQUIRE(during - before < 65 * kMiB);
  REQUIRE(after - before < kMiB);
}

TEST_CASE("ActivationProbe on CPU measures what forward keeps for backward", "[memory]") {
  const auto x = torch::randn({256, 512});
  const auto w = torch::randn({4096, 512}).requires_grad_();
  const auto forward = [&] { return kiln::ops::relu(kiln::ops::linear(x, w, std::nullopt)).sum(); };
  // The first matrix product makes the BLAS's one-time workspaces (~9 MB here);
  // a training step after the first sees none of that.
  forward().backward();
  kiln::train::ActivationProbe probe(torch::kCPU);
  REQUIRE_THROWS_WITH(probe.bytes(), Catch::Contains("call forward_done()"));
  // z = x·wᵀ is freed; relu keeps its output y (256, 4096) for backward: 4 MiB.
  auto loss = forward();
  probe.forward_done();
  loss.backward();
  INFO("measured " << probe.bytes() << " bytes");
  REQUIRE(probe.bytes() >= 256 * 4096 * 4);
  REQUIRE(probe.bytes() < 256 * 4096 * 4 + kMiB);
}

TEST_CASE("the memory report has the documented JSON fields and a line per quantity",
          "[memory]") {
  kiln::nn::Mlp model(kiln::nn::MlpOptions(10, {6}, 3));
  kiln::optim::AdamW opt(model->parameters());
  one_step(model, opt);
  const auto r = kiln::train::memory_report(7, opt, torch::kCPU, 12345);
  const auto j = r.json();
  for (const char* key : {"step", "rss_bytes", "peak_rss_bytes", "heap_bytes", "parameter_bytes",
                          "gradient_bytes", "optimizer_state_bytes", "uncounted_optimizer_states",
                          "activation_peak_bytes", "cuda"}) {
    INFO(key);
    REQUIRE(j.contains(key));
  }
  REQUIRE(j.size() == 10);
  REQUIRE(j["step"] == 7);
  REQUIRE(j["parameter_bytes"] == kToyParamBytes);
  REQUIRE(j["optimizer_state_bytes"] == 2 * kToyParamBytes);
  REQUIRE(j["activation_peak_bytes"] == 12345);
  REQUIRE(j["cuda"].is_null());
  REQUIRE(j["rss_bytes"].get<int64_t>() > 0);
  REQUIRE(kiln::train::memory_report(7, opt, torch::kCPU).json()["activation_peak_bytes"].is_null());

  const auto table = r.table();
  for (const char* row : {"memory at step 7", "resident (RSS)", "resident peak", "heap in use",
                          "parameters", "gradients", "optimizer state", "activations (step peak)"}) {
    INFO(table);
    REQUIRE(table.find(row) != std::string::npos);
  }
  REQUIRE(table.find("cuda") == std::string::npos);
}

TEST_CASE("CUDA: allocator statistics, activation probe, history snapshot and the OOM message",
          "[memory][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  kiln::test::TempDir dir;
  kiln::train::record_cuda_memory_history(true);
  auto big = torch::empty({64 * kMiB}, torch::dtype(at::kFloat).device(torch::kCUDA));  // 256 MiB
  auto c = kiln::train::cuda_memory(0);
  REQUIRE(c);
  REQUIRE(c->allocated_bytes >= 256 * kMiB);
  REQUIRE(c->reserved_bytes >= c->allocated_bytes);
  REQUIRE(c->peak_allocated_bytes >= c->allocated_bytes);
  REQUIRE(c->total_bytes > c->reserved_bytes);

  {
    const auto x = torch::randn({256, 512}, torch::kCUDA);
    const auto w = torch::randn({4096, 512}, torch::kCUDA).requires_grad_();
    // One step first: cuBLAS's and cuBLASLt's workspaces, which ATen keeps from the
    // first matrix product on, are not the step's activations (on the H200 the probe
    // read 77 MiB without this step, some 60 MiB more than the activations).
    kiln::ops::relu(kiln::ops::linear(x, w, std::nullopt)).sum().backward();
    kiln::train::ActivationProbe probe(torch::Device(torch::kCUDA, 0));
    auto loss = kiln::ops::relu(kiln::ops::linear(x, w, std::nullopt)).sum();
    probe.forward_done();
    loss.backward();
    INFO("measured " << probe.bytes() << " bytes");
    REQUIRE(probe.bytes() >= 256 * 4096 * 4);  // y, plus backward's transients
    REQUIRE(probe.bytes() < 64 * kMiB);
  }

  const std::string snapshot = dir / "snapshot.pickle";
  kiln::train::write_cuda_memory_snapshot(snapshot);
  std::ifstream in(snapshot, std::ios::binary);
  std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  REQUIRE(bytes.size() > 100);
  REQUIRE(static_cast<unsigned char>(bytes[0]) == 0x80);  // a pickle's PROTO opcode
  REQUIRE(bytes.find("segments") != std::string::npos);
  REQUIRE(bytes.find("device_traces") != std::string::npos);

  std::string message;
  try {
    auto too_big = torch::empty({2 * c->total_bytes}, torch::dtype(at::kByte).device(torch::kCUDA));
  } catch (const c10::OutOfMemoryError& e) {
    message = kiln::train::describe_cuda_oom(e, 64, dir / "oom.pickle");
  }
  INFO(message);
  REQUIRE(message.find("CUDA out of memory at batch size 64 on cuda:0") != std::string::npos);
  REQUIRE(message.find("allocated by tensors") != std::string::npos);
  REQUIRE(std::filesystem::file_size(dir / "oom.pickle") > 100);
  REQUIRE(kiln::train::cuda_memory(0)->ooms >= 1);

  kiln::train::record_cuda_memory_history(false);
  big.reset();
  kiln::train::empty_cuda_cache();
  REQUIRE(kiln::train::cuda_memory(0)->reserved_bytes < c->reserved_bytes);
  kiln::train::set_cuda_memory_fraction(0.5);
  REQUIRE_THROWS(torch::empty({c->total_bytes * 6 / 10}, torch::dtype(at::kByte).device(torch::kCUDA)));
  kiln::train::set_cuda_memory_fraction(1.0);
  const auto r = kiln::train::memory_report(1, kiln::optim::AdamW(std::vector<torch::Tensor>{
                                                   torch::zeros({4}, torch::kCUDA).requires_grad_()}),
                                            torch::Device(torch::kCUDA, 0));
  REQUIRE(r.json()["cuda"]["total_bytes"] == c->total_bytes);
  REQUIRE(r.table().find("cuda reserved") != std::string::npos);
}
