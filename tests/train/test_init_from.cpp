// model.init_from: weights from a .safetensors file or a checkpoint directory are
// copied in by name; a file that does not fit is refused with every missing,
// unexpected and mis-shaped tensor in one message, and the model stays as it was.
#include <torch/torch.h>

#include "nn/mlp.h"
#include "support.h"
#include "train/checkpoint.h"
#include "train/init_from.h"
#include "util/error.h"
#include "util/safetensors.h"

namespace {

kiln::safetensors::NamedTensors state(const torch::nn::Module& m) {
  kiln::safetensors::NamedTensors out;
  for (const auto& p : m.named_parameters()) out.emplace_back(p.key(), p.value());
  return out;
}

}  // namespace

TEST_CASE("init_from copies a safetensors file's tensors by name, or refuses all of a misfit",
          "[train][init_from]") {
  kiln::test::TempDir dir;
  torch::manual_seed(1);
  kiln::nn::Mlp source(kiln::nn::MlpOptions(6, {8}, 3));
  // Written as PyTorch users often keep weights: in another dtype.
  kiln::safetensors::NamedTensors half;
  for (const auto& [n, t] : state(*source)) half.emplace_back(n, t.to(at::kDouble));
  kiln::safetensors::save_file(dir / "w.safetensors", half);

  kiln::nn::Mlp target(kiln::nn::MlpOptions(6, {8}, 3));
  REQUIRE(kiln::train::init_from(*target, dir / "w.safetensors") == 4);
  for (const auto& [n, t] : state(*target)) {
    INFO(n);
    REQUIRE(at::equal(t, source->named_parameters()[n]));
  }

  kiln::nn::Mlp other(kiln::nn::MlpOptions(6, {8, 4}, 3));
  const auto before = state(*other);
  std::vector<at::Tensor> copies;
  for (const auto& [n, t] : before) copies.push_back(t.clone());
  try {
    kiln::train::init_from(*other, dir / "w.safetensors");
    FAIL("expected an InputError");
  } catch (const kiln::InputError& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK_THAT(msg, Catch::Contains("w.safetensors: model.init_from: the file's tensors do not "
                                    "match the model's by name and shape"));
    CHECK_THAT(msg, Catch::Contains("missing from the file (the model has them): layers.2.bias, "
                                    "layers.2.weight"));
    CHECK_THAT(msg, Catch::Contains("shapes differ: layers.1.bias (file [3], model [4]), "
                                    "layers.1.weight (file [3, 8], model [4, 8])"));
  }
  for (size_t i = 0; i < before.size(); ++i) REQUIRE(at::equal(before[i].second, copies[i]));

  kiln::nn::Mlp narrow(kiln::nn::MlpOptions(6, {}, 3));
  CHECK_THROWS_WITH(kiln::train::init_from(*narrow, dir / "w.safetensors"),
                    Catch::Contains("unexpected (the model has no such tensor): layers.1.bias, layers.1.weight"));
  CHECK_THROWS_WITH(kiln::train::init_from(*narrow, dir / "none.safetensors"),
                    Catch::Contains("model.init_from: expected a .safetensors file, a checkpoint directory "
                                    "or a run directory (its newest checkpoint), found nothing at"));
}

TEST_CASE("init_from refuses NaN or inf weights, naming the tensor, and leaves the model as it was",
          "[train][init_from]") {
  kiln::test::TempDir dir;
  torch::manual_seed(2);
  kiln::nn::Mlp source(kiln::nn::MlpOptions(6, {8}, 3));
  auto tensors = state(*source);
  tensors[2].second = tensors[2].second.clone();
  tensors[2].second[1][5] = std::numeric_limits<float>::quiet_NaN();  // layers.1.weight, flat index 13
  kiln::safetensors::save_file(dir / "nan.safetensors", tensors);
  kiln::nn::Mlp target(kiln::nn::MlpOptions(6, {8}, 3));
  std::vector<at::Tensor> before;
  for (const auto& [n, t] : state(*target)) before.push_back(t.clone());
  CHECK_THROWS_AS(kiln::train::init_from(*target, dir / "nan.safetensors"), kiln::InputError);
  CHECK_THROWS_WITH(kiln::train::init_from(*target, dir / "nan.safetensors"),
                    Catch::Equals(dir / "nan.safetensors" + ": model.init_from: tensor '" + tensors[2].first +
                                  "': expected finite values, found nan at flat index 13"));
  const auto after = state(*target);
  for (size_t i = 0; i < before.size(); ++i) REQUIRE(at::equal(after[i].second, before[i]));
  tensors[2].second[1][5] = -std::numeric_limits<float>::infinity();
  kiln::safetensors::save_file(dir / "inf.safetensors", tensors);
  CHECK_THROWS_WITH(kiln::train::init_from(*target, dir / "inf.safetensors"),
                    Catch::Contains("expected finite values, found -inf at flat index 13"));
}

TEST_CASE("init_from takes a run directory's newest checkpoint", "[train][init_from]") {
  kiln::test::TempDir dir;
  torch::manual_seed(2);
  kiln::nn::Mlp model(kiln::nn::MlpOptions(6, {8}, 3));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  kiln::train::Checkpointer checkpointer(dir / "run", *model, optimizer);
  kiln::train::TrainPosition at;
  at.step = 1;
  checkpointer.save(at, "", {});
  // Step 2's weights differ from step 1's.
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.add_(1.0f);
  std::vector<at::Tensor> newest;
  for (const auto& [n, t] : state(*model)) newest.push_back(t.clone());
  at.step = 2;
  checkpointer.save(at, "", {});
  kiln::nn::Mlp fresh(kiln::nn::MlpOptions(6, {8}, 3));
  REQUIRE(kiln::train::init_from(*fresh, dir / "run") == 4);
  const auto got = state(*fresh);
  for (size_t i = 0; i < got.size(); ++i) REQUIRE(at::equal(got[i].second, newest[i]));
  std::filesystem::create_directories(dir / "empty/checkpoints");
  CHECK_THROWS_WITH(kiln::train::init_from(*fresh, dir / "empty"),
                    Catch::Contains("expected a complete checkpoint under checkpoints/, found none"));
  std::filesystem::create_directories(dir / "neither");
  CHECK_THROWS_WITH(kiln::train::init_from(*fresh, dir / "neither"),
                    Catch::Contains("found a directory with neither model.safetensors nor checkpoints/ at"));
}
