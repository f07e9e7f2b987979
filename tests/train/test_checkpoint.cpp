// Checkpoints: a full round trip (model, optimizer, extra part, RNG, position);
// damaged or mismatched checkpoints refused with the model untouched; retention;
// leftovers of a crash; what --resume names.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "nn/mlp.h"
#include "optim/adamw.h"
#include "support.h"
#include "train/checkpoint.h"
#include "util/error.h"
#include "util/files.h"
#include "util/safetensors.h"
#include "util/torch_pickle.h"
#include "util/torch_archive.h"

namespace fs = std::filesystem;
using kiln::train::Checkpointer;
using kiln::train::CheckpointOptions;
using kiln::train::MetricMode;
using kiln::train::TrainPosition;
using Catch::Matchers::Contains;

namespace {

// A model, its optimizer with state, and an extra part (a counter and a tensor,
// as a GradScaler would have), all saved by one Checkpointer.
struct Setup {
  kiln::nn::Mlp model;
  kiln::optim::AdamW optimizer;
  int64_t counter = 0;
  torch::Tensor scale = torch::ones({1});
  Checkpointer checkpointer;

  Setup(const std::string& run_dir, uint64_t seed, std::vector<int64_t> hidden = {6},
        CheckpointOptions options = {}, bool with_part = true)
      : model((torch::manual_seed(seed), kiln::nn::MlpOptions(8, hidden, 3))),
        optimizer(model->parameters()),
        checkpointer(run_dir, *model, optimizer, options) {
    if (with_part)
      checkpointer.add_part({"scaler",
                             [this](torch::serialize::OutputArchive& ar) {
                               ar.write("counter", c10::IValue(counter));
                               ar.write("scale", scale);
                             },
                             [this](torch::serialize::InputArchive& ar) {
                               c10::IValue v;
                               ar.read("counter", v);
                               counter = v.toInt();
                               ar.read("scale", scale);
                             }});
  }

  void train_steps(int n) {
    for (int i = 0; i < n; ++i) {
      optimizer.zero_grad();
      model->forward(batch_x()).pow(2).mean().backward();
      optimizer.step();
    }
  }
  static torch::Tensor batch_x() { return torch::linspace(-1, 1, 32).reshape({4, 8}); }

  std::vector<torch::Tensor> params() const {
    std::vector<torch::Tensor> out;
    for (const auto& p : model->parameters()) out.push_back(p.detach().clone());
    return out;
  }
};

void require_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) REQUIRE(torch::equal(a[i], b[i]));
}

// Replaces a checkpoint file and its manifest record, as a consistent writer would.
void rewrite(const std::string& dir, const std::string& file, const std::string& bytes) {
  kiln::files::write_synced(dir + "/" + file, bytes);
  auto m = nlohmann::json::parse(kiln::files::read(dir + "/manifest.json"));
  m["files"][file] = {{"bytes", bytes.size()}, {"crc32", kiln::files::crc32(bytes)}};
  kiln::files::write_synced(dir + "/manifest.json", m.dump());
}

std::string load_error(Setup& s, const std::string& dir) {
  try {
    s.checkpointer.load(dir);
  } catch (const kiln::InputError& e) {
    return e.what();
  }
  FAIL("expected an InputError, got none");
  return "";
}

std::vector<std::string> entries_of(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("a checkpoint restores model, optimizer, extra part, RNG and position",
          "[train][checkpoint]") {
  kiln::test::TempDir dir;
  Setup a(dir / "run", 1);
  a.train_steps(3);
  a.counter = 7;
  a.scale = torch::full({1}, 1024.0);
  torch::manual_seed(42);
  torch::rand({5});  // the RNG somewhere in the middle of its stream
  const TrainPosition pos{3, 1, 2, 99};
  const auto saved = a.checkpointer.save(pos, "[train]\nseed = 99\n", {{"test_accuracy", 0.5}});
  REQUIRE(saved == dir / "run/checkpoints/step_000000003");
  const auto next_random = torch::rand({4});
  const auto params = a.params();

  Setup b(dir / "run", 2);  // other initial weights, fresh optimizer, other RNG
  torch::manual_seed(7);
  const auto back = b.checkpointer.load(saved);
  REQUIRE(back.step == 3);
  REQUIRE(back.epoch == 1);
  REQUIRE(back.batch == 2);
  REQUIRE(back.shuffle_seed == 99);
  require_equal(b.params(), params);
  REQUIRE(b.counter == 7);
  REQUIRE(torch::equal(b.scale, torch::full({1}, 1024.0)));
  REQUIRE(torch::equal(torch::rand({4}), next_random));  // the CPU RNG continues where it was
  // The optimizer state came along: one more step is the same on both.
  a.train_steps(1);
  b.train_steps(1);
  require_equal(b.params(), a.params());

  REQUIRE(kiln::files::read(saved + "/config.toml") == "[train]\nseed = 99\n");
  const auto m = nlohmann::json::parse(kiln::files::read(saved + "/manifest.json"));
  REQUIRE(m["step"] == 3);
  REQUIRE(m["metrics"]["test_accuracy"] == 0.5);
  for (const char* f : {"model.safetensors", "optimizer.pt", "scaler.pt", "trainer.pt", "config.toml"}) {
    INFO(f);
    const auto bytes = kiln::files::read(saved + "/" + f);
    REQUIRE(m["files"][f]["bytes"] == bytes.size());
    REQUIRE(m["files"][f]["crc32"] == kiln::files::crc32(bytes));
  }
}

TEST_CASE("a checkpoint's .pt files are dicts torch.load(weights_only=True) reads; TorchScript "
          "ones are refused, never compiled", "[train][checkpoint][interop]") {
  kiln::test::TempDir dir;
  Setup a(dir / "run", 1);
  a.train_steps(3);
  a.counter = 7;
  a.scale = torch::full({1}, 1024.0);
  torch::manual_seed(42);
  const auto rng = at::detail::getDefaultCPUGenerator().get_state();
  const auto saved = a.checkpointer.save({3, 1, 2, 99, 1.5, 2}, "cfg");
  const auto trainer = kiln::torch_pickle::load_file(saved + "/trainer.pt").toGenericDict();
  REQUIRE(trainer.at("step").toInt() == 3);
  REQUIRE(torch::equal(trainer.at("rng_cpu").toTensor(), rng));
  REQUIRE(kiln::torch_pickle::load_file(saved + "/scaler.pt").toGenericDict().at("counter").toInt() == 7);
  REQUIRE(kiln::torch_pickle::load_file(saved + "/optimizer.pt").isGenericDict());

  const auto next_random = torch::rand({4});
  {
    Setup b(dir / "run", 2);
    torch::manual_seed(7);
    const auto back = b.checkpointer.load(saved);
    REQUIRE((back.step == 3 && back.shuffle_seed == 99 && back.loss_since_eval == 1.5));
    REQUIRE(b.counter == 7);
    REQUIRE(torch::equal(b.scale, a.scale));
    REQUIRE(torch::equal(torch::rand({4}), next_random));
    require_equal(b.params(), a.params());
  }

  // The same state as kiln wrote it before 2026-11-30 (OutputArchive::save_to, a
  // TorchScript archive whose code/ its importer compiles), file by file: refused
  // naming the file, and the run it was to be loaded into is as it was.
  const auto script = [](const std::function<void(torch::serialize::OutputArchive&)>& fill) {
    torch::serialize::OutputArchive ar;
    fill(ar);
    std::ostringstream out;
    ar.save_to(out);
    return out.str();
  };
  const std::vector<std::pair<std::string, std::string>> old_files{
      {"optimizer.pt", script([&](auto& ar) { a.optimizer.save(ar); })},
      {"scaler.pt", script([&](auto& ar) {
         ar.write("counter", c10::IValue(a.counter));
         ar.write("scale", a.scale);
       })},
      {"trainer.pt", script([&](auto& ar) { ar.write("step", c10::IValue(int64_t{3})); })}};
  for (const auto& [file, bytes] : old_files) {
    INFO(file);
    const std::string old = dir / ("old_" + file);
    fs::copy(saved, old, fs::copy_options::recursive);
    rewrite(old, file, bytes);
    Setup c(dir / "run", 3);
    const auto before = c.params();
    REQUIRE_THAT(load_error(c, old),
                 Contains(old + "/" + file + ": expected a data-only .pt file (a dict of "
                          "tensors and plain values), found a TorchScript archive"));
    require_equal(c.params(), before);
  }

  const auto py = kiln::test::python_or_skip("torch");
  if (!py) return;
  std::ofstream(dir / "check.py") << R"(import sys, torch
d = sys.argv[1]
t = torch.load(d + "/trainer.pt", weights_only=True)
assert t["step"] == 3 and t["loss_since_eval"] == 1.5 and t["rng_cpu"].dtype == torch.uint8, t
assert torch.load(d + "/scaler.pt", weights_only=True)["counter"] == 7
def tensors(x):  # nested archives are nested dicts
    return sum((tensors(v) if isinstance(v, dict) else [v] for v in x.values()
                if isinstance(v, (dict, torch.Tensor))), [])
assert tensors(torch.load(d + "/optimizer.pt", weights_only=True))
)";
  const std::string cmd = *py + " " + (dir / "check.py") + " " + saved;
  REQUIRE(std::system(cmd.c_str()) == 0);
}

TEST_CASE("model.safetensors holds the module's own parameter and buffer names",
          "[train][checkpoint]") {
  struct Net : torch::nn::Module {
    Net() {
      register_parameter("w", torch::randn({2, 3}));
      register_module("sub", torch::nn::Linear(3, 2));
      register_buffer("running_mean", torch::arange(3.0));
    }
  };
  kiln::test::TempDir dir;
  Net net;
  torch::optim::SGD sgd(net.parameters(), 0.1);
  const auto saved = Checkpointer(dir.path(), net, sgd).save({}, "");
  const auto file = kiln::safetensors::load_file(saved + "/model.safetensors");
  std::set<std::string> names;
  for (const auto& [name, t] : file.tensors) names.insert(name);
  REQUIRE(names == std::set<std::string>{"w", "sub.weight", "sub.bias", "running_mean"});
  REQUIRE(file.metadata.at("format") == "pt");

  Net other;
  torch::optim::SGD sgd2(other.parameters(), 0.1);
  Checkpointer(dir.path(), other, sgd2).load(saved);
  REQUIRE(torch::equal(other.named_parameters()["w"], net.named_parameters()["w"]));
  REQUIRE(torch::equal(other.named_buffers()["running_mean"], torch::arange(3.0)));
}

TEST_CASE("a truncated or corrupted checkpoint file is refused and the model is unchanged",
          "[train][checkpoint]") {
  kiln::test::TempDir dir;
  Setup a(dir / "run", 1);
  a.train_steps(2);
  const auto saved = a.checkpointer.save({2, 0, 2, 0}, "cfg");
  for (const char* f : {"model.safetensors", "optimizer.pt", "scaler.pt", "trainer.pt", "config.toml"}) {
    INFO(f);
    const std::string path = saved + "/" + f;
    const auto good = kiln::files::read(path);
    Setup b(dir / "run", 2);
    const auto before = b.params();

    kiln::files::write_synced(path, good.substr(0, good.size() / 2));
    REQUIRE_THAT(load_error(b, saved),
                 Contains(path + ": truncated or corrupted: expected " +
                          std::to_string(good.size()) + " bytes (the manifest's), found " +
                          std::to_string(good.size() / 2)));
    std::string flipped = good;
    flipped[good.size() / 2] ^= 0x10;
    kiln::files::write_synced(path, flipped);
    REQUIRE_THAT(load_error(b, saved), Contains(path + ": truncated or corrupted: CRC-32"));
    fs::remove(path);
    REQUIRE_THAT(load_error(b, saved), Contains(path + ": cannot read the file"));

    require_equal(b.params(), before);
    REQUIRE(b.counter == 0);
    kiln::files::write_synced(path, good);
  }
  Setup c(dir / "run", 3);
  REQUIRE_NOTHROW(c.checkpointer.load(saved));  // restored files: whole again
  // A manifest record is named by its file; a name that leaves the directory is refused.
  const std::string manifest_path = saved + "/manifest.json";
  const auto manifest = kiln::files::read(manifest_path);
  auto m = nlohmann::json::parse(manifest);
  m["files"]["trainer.pt"]["bytes"] = -1;
  kiln::files::write_synced(manifest_path, m.dump());
  REQUIRE(load_error(c, saved) == manifest_path + ": files: trainer.pt: expected {\"bytes\": N, \"crc32\": C} "
                                                  "with integers N, C >= 0, found {\"bytes\":-1,\"crc32\":" +
                                      nlohmann::json::parse(manifest)["files"]["trainer.pt"]["crc32"].dump() + "}");
  m = nlohmann::json::parse(manifest);
  m["files"]["../config.toml"] = {{"bytes", 3}, {"crc32", 0}};
  kiln::files::write_synced(manifest_path, m.dump());
  REQUIRE(load_error(c, saved) == manifest_path + ": files: expected names of files in the checkpoint "
                                                  "directory, found '../config.toml'");
  kiln::files::write_synced(manifest_path, manifest);
  fs::remove(saved + "/manifest.json");
  REQUIRE_THAT(load_error(c, saved), Contains(saved + "/manifest.json: missing"));
}

TEST_CASE("a checkpoint of other shapes, dtypes or tensors is refused naming the tensor",
          "[train][checkpoint]") {
  kiln::test::TempDir dir;
  Setup a(dir / "run", 1);
  const auto saved = a.checkpointer.save({1, 0, 1, 0}, "cfg");
  const std::string file = saved + "/model.safetensors";

  Setup narrow(dir / "run", 2, {5});
  const auto before = narrow.params();
  REQUIRE(load_error(narrow, saved) ==
          file + ": 'layers.0.weight' is Float[6, 8] but the model's is Float[5, 8]");
  require_equal(narrow.params(), before);

  Setup wide(dir / "run", 2);
  wide.model->to(torch::kDouble);
  REQUIRE(load_error(wide, saved) ==
          file + ": 'layers.0.weight' is Float[6, 8] but the model's is Double[6, 8]");

  // Rewritten consistently (manifest updated): the names themselves differ.
  auto tensors = kiln::safetensors::load_file(file).tensors;
  const auto original = kiln::files::read(file);
  auto missing = tensors;
  missing.erase(std::find_if(missing.begin(), missing.end(),
                             [](const auto& p) { return p.first == "layers.1.bias"; }));
  rewrite(saved, "model.safetensors", kiln::safetensors::serialize(missing));
  Setup b(dir / "run", 2);
  REQUIRE(load_error(b, saved) == file + ": has no tensor 'layers.1.bias', which the model has "
                                         "(a checkpoint of another model?)");
  auto extra = tensors;
  extra.emplace_back("head.weight", torch::zeros({2}));
  rewrite(saved, "model.safetensors", kiln::safetensors::serialize(extra));
  REQUIRE(load_error(b, saved) == file + ": holds tensor 'head.weight', which the model does not "
                                         "have (a checkpoint of another model?)");
  rewrite(saved, "model.safetensors", original);
  REQUIRE_NOTHROW(b.checkpointer.load(saved));

  // State parts must match the run's: a run without the scaler, or with another part.
  Setup no_part(dir / "run", 2, {6}, {}, /*with_part=*/false);
  REQUIRE_THAT(load_error(no_part, saved), Contains("holds 'scaler' state (scaler.pt), which this "
                                                    "run does not have"));
  Setup more(dir / "run", 2);
  more.checkpointer.add_part({"schedule", [](auto&) {}, [](auto&) {}});
  REQUIRE_THAT(load_error(more, saved),
               Contains("has no 'schedule' state (schedule.pt), which this run needs"));
}

TEST_CASE("retention keeps the newest K checkpoints and the best by the metric",
          "[train][checkpoint]") {
  kiln::test::TempDir dir;
  const std::vector<double> accuracy = {0.5, 0.9, 0.6, 0.7, 0.65, 0.6};
  Setup s(dir / "run", 1, {6},
          CheckpointOptions().keep_last(2).best_metric("test_accuracy").best_mode(MetricMode::kMax));
  for (int64_t step = 1; step <= 6; ++step)
    s.checkpointer.save({step, 0, step, 0}, "", {{"test_accuracy", accuracy[step - 1]}});
  const auto root = dir / "run/checkpoints";
  REQUIRE(entries_of(root) ==
          std::vector<std::string>{"step_000000002", "step_000000005", "step_000000006"});
  REQUIRE(kiln::train::best_checkpoint(dir / "run", "test_accuracy", MetricMode::kMax) ==
          root + "/step_000000002");
  REQUIRE(kiln::train::best_checkpoint(dir / "run", "test_accuracy", MetricMode::kMin) ==
          root + "/step_000000006");  // 0.6 at step 6 (step 1's 0.5 is gone)
  REQUIRE_FALSE(kiln::train::best_checkpoint(dir / "run", "test_loss", MetricMode::kMin));
  REQUIRE(kiln::train::latest_checkpoint(dir / "run") == root + "/step_000000006");

  // keep_last = 0 keeps every checkpoint.
  Setup all(dir / "all", 1);
  for (int64_t step = 1; step <= 4; ++step) all.checkpointer.save({step, 0, step, 0}, "");
  REQUIRE(kiln::train::list_checkpoints(dir / "all").size() == 4);
}

TEST_CASE("a leftover temporary directory from a crash is ignored and cleaned on the next save",
          "[train][checkpoint]") {
  kiln::test::TempDir dir;
  Setup s(dir / "run", 1);
  s.checkpointer.save({3, 0, 3, 0}, "");
  const auto root = dir / "run/checkpoints";
  // A save of step 9 that crashed before its rename, and a deletion that crashed.
  fs::create_directories(root + "/.tmp-step_000000009");
  kiln::files::write_synced(root + "/.tmp-step_000000009/model.safetensors", "half");
  fs::create_directories(root + "/.trash-step_000000001");
  REQUIRE(kiln::train::latest_checkpoint(dir / "run") == root + "/step_000000003");
  REQUIRE(kiln::train::list_checkpoints(dir / "run").size() == 1);
  s.checkpointer.save({4, 0, 4, 0}, "");
  REQUIRE(entries_of(root) == std::vector<std::string>{"step_000000003", "step_000000004"});
}

TEST_CASE("saving a step again replaces its checkpoint whole", "[train][checkpoint]") {
  kiln::test::TempDir dir;
  Setup s(dir / "run", 1);
  s.counter = 1;
  s.checkpointer.save({5, 0, 5, 0}, "first");
  s.counter = 2;
  const auto saved = s.checkpointer.save({5, 0, 5, 0}, "second");
  REQUIRE(entries_of(dir / "run/checkpoints") == std::vector<std::string>{"step_000000005"});
  REQUIRE(kiln::files::read(saved + "/config.toml") == "second");
  Setup t(dir / "run", 2);
  t.checkpointer.load(saved);
  REQUIRE(t.counter == 2);
}

// The fault test's race, made certain: the run directory moved away between a step's
// check and its checkpoint. A save that made the path again would put the checkpoint
// into a new directory the trainer then takes for another's (and would not rescue).
TEST_CASE("a run directory deleted under the checkpointer is not made again by a save",
          "[train][checkpoint]") {
  kiln::test::TempDir dir;
  for (const bool saved_before : {false, true}) {
    CAPTURE(saved_before);
    const std::string run = dir / (saved_before ? "after_save" : "before_save");
    fs::create_directories(run);
    Setup s(run, 1);
    if (saved_before) s.checkpointer.save({2, 0, 2, 0}, "");
    fs::rename(run, run + ".moved");
    try {
      s.checkpointer.save({4, 0, 4, 0}, "");
      FAIL("the save went on without its run directory");
    } catch (const fs::filesystem_error& e) {
      REQUIRE(e.code() == std::errc::no_such_file_or_directory);
    }
    REQUIRE_FALSE(fs::exists(run));
    // Made again by its owner (the trainer's rescue), the next save writes into it.
    fs::create_directory(run);
    REQUIRE(s.checkpointer.save({4, 0, 4, 0}, "") == run + "/checkpoints/step_000000004");
  }
  // A checkpointer whose run directory did not exist yet makes it (and its parents).
  Setup fresh(dir / "new/run", 1);
  REQUIRE(fresh.checkpointer.save({1, 0, 1, 0}, "") == dir / "new/run/checkpoints/step_000000001");
}

TEST_CASE("a resume argument names a checkpoint, a run, or the latest run", "[train][checkpoint]") {
  kiln::test::TempDir dir;
  Setup a(dir / "runs/a", 1), b(dir / "runs/b", 1);
  a.checkpointer.save({4, 0, 4, 0}, "");
  const auto a2 = a.checkpointer.save({8, 0, 8, 0}, "");
  const auto b1 = b.checkpointer.save({2, 0, 2, 0}, "");
  // b's checkpoint is the most recently written (set explicitly: file times can tie).
  fs::last_write_time(a2 + "/manifest.json", fs::last_write_time(b1 + "/manifest.json") - std::chrono::seconds(5));

  const auto by_dir = kiln::train::resolve_resume(a2);
  REQUIRE(by_dir.checkpoint_dir == a2);
  REQUIRE(fs::equivalent(by_dir.run_dir, dir / "runs/a"));
  const auto by_run = kiln::train::resolve_resume(dir / "runs/a/");
  REQUIRE(by_run.checkpoint_dir == a2);
  const auto latest = kiln::train::resolve_resume("latest", dir / "runs");
  REQUIRE(latest.checkpoint_dir == b1);
  REQUIRE(fs::equivalent(latest.run_dir, dir / "runs/b"));
  REQUIRE(kiln::train::resolve_resume("latest", dir / "runs/a").checkpoint_dir == a2);

  REQUIRE_THROWS_WITH(kiln::train::resolve_resume(dir / "nope"),
                      Contains("expected a checkpoint directory (with manifest.json), a run "
                               "directory (with checkpoints/) or 'latest', found nothing"));
  fs::create_directories(dir / "empty/checkpoints");
  REQUIRE_THROWS_WITH(kiln::train::resolve_resume(dir / "empty"),
                      Contains("expected a complete checkpoint under checkpoints/, found none"));
  REQUIRE_THROWS_WITH(kiln::train::resolve_resume("latest", dir / "empty/checkpoints"),
                      Contains("--resume latest: expected a run directory"));
}

TEST_CASE("a CUDA model and the CUDA RNG round-trip through a checkpoint",
          "[train][checkpoint][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  kiln::test::TempDir dir;
  Setup a(dir / "run", 1);
  a.model->to(torch::kCUDA);
  torch::cuda::manual_seed_all(11);
  const auto saved = a.checkpointer.save({1, 0, 1, 0}, "");
  const auto next = torch::rand({4}, torch::kCUDA);
  Setup b(dir / "run", 2);
  b.model->to(torch::kCUDA);
  torch::cuda::manual_seed_all(3);
  b.checkpointer.load(saved);
  REQUIRE(torch::equal(torch::rand({4}, torch::kCUDA), next));
  require_equal(b.params(), a.params());
}

namespace {
// A trainer.pt for step 1 with the given CPU state and one CUDA device's state.
std::string trainer_state_bytes(const torch::Tensor& rng_cpu, const torch::Tensor& rng_cuda_0) {
  torch::serialize::OutputArchive ar;
  ar.write("step", c10::IValue(int64_t{1}));
  ar.write("epoch", c10::IValue(int64_t{0}));
  ar.write("batch", c10::IValue(int64_t{1}));
  ar.write("shuffle_seed", c10::IValue(int64_t{0}));
  ar.write("rng_cpu", rng_cpu);
  ar.write("rng_cuda_devices", c10::IValue(int64_t{1}));
  ar.write("rng_cuda_0", rng_cuda_0);
  return kiln::torch_pickle::serialize_archive(ar);
}
}  // namespace

TEST_CASE("an RNG state its generator would refuse is refused before the run changes",
          "[train][checkpoint]") {
  kiln::test::TempDir dir;
  Setup a(dir / "run", 1);
  a.train_steps(1);
  const auto saved = a.checkpointer.save({1, 0, 1, 0}, "cfg");
  const auto bad = torch::zeros({3}, torch::kByte);
  const auto good_cpu = at::detail::getDefaultCPUGenerator().get_state();
  Setup b(dir / "run", 2);
  const auto before = b.params();
  rewrite(saved, "trainer.pt", trainer_state_bytes(bad, bad));
  REQUIRE_THAT(load_error(b, saved), Contains(saved + "/trainer.pt: rng_cpu:") &&
                                         Contains("; found a Byte tensor of shape [3]"));
  require_equal(b.params(), before);
  if (!torch::cuda::is_available()) {
    // A checkpoint written on CUDA resumes on a machine without: its CUDA states
    // are neither restored nor checked.
    rewrite(saved, "trainer.pt", trainer_state_bytes(good_cpu, bad));
    REQUIRE_NOTHROW(b.checkpointer.load(saved));
    require_equal(b.params(), a.params());
  }
}

TEST_CASE("a CUDA RNG state its generator would refuse is refused before the run changes",
          "[train][checkpoint][cuda]") {
  if (!kiln::test::cuda_available_or_skip()) return;
  kiln::test::TempDir dir;
  Setup a(dir / "run", 1);
  const auto saved = a.checkpointer.save({1, 0, 1, 0}, "cfg");
  rewrite(saved, "trainer.pt", trainer_state_bytes(at::detail::getDefaultCPUGenerator().get_state(),
                                                   torch::zeros({3}, torch::kByte)));
  Setup b(dir / "run", 2);
  const auto before = b.params();
  const auto cpu_rng = at::detail::getDefaultCPUGenerator().get_state();
  REQUIRE_THAT(load_error(b, saved), Contains(saved + "/trainer.pt: rng_cuda_0:"));
  require_equal(b.params(), before);
  // Nothing was applied: neither the CPU generator (checked first) nor the model.
  REQUIRE(torch::equal(at::detail::getDefaultCPUGenerator().get_state(), cpu_rng));
}
