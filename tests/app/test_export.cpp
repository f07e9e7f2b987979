// kiln export: a checkpoint (float32, bfloat16 and int64 tensors, a hand-made data.json)
// exported as safetensors, .npy files and a .pt file gives back every tensor bit for bit
// and the data.json text, in kiln and in Python's own readers; bad input is refused
// naming it, and no output, whole or partial, is left behind.
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "data/npy.h"
#include "checkpoint_arg.h"
#include "export_command.h"
#include "support.h"
#include "train/checkpoint.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/files.h"
#include "util/safetensors.h"
#include "util/torch_pickle.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using kiln::app::run_export;

namespace {

const std::string kDataJson = R"({"transform": {"mean": 0.25, "std": 0.5}, "classes": ["a", "b"]})";

// A module whose state has a float32 parameter, a bfloat16 and an int64 buffer.
struct Tiny : torch::nn::Module {
  Tiny() {
    register_parameter("weight", torch::randn({2, 3}));
    register_buffer("scale", torch::randn({4}).to(at::kBFloat16));
    register_buffer("count", torch::tensor(int64_t{5}));
  }
};

// A run with one checkpoint of `model`, the hand-made data.json in it as the trainer
// puts the run's own (Checkpointer::add_file: listed in the manifest with its CRC-32).
std::string make_run(const std::string& run_dir, Tiny& model) {
  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.1));
  kiln::train::Checkpointer checkpointer(run_dir, model, optimizer);
  checkpointer.add_file(kiln::train::kDataFile, kDataJson);
  return checkpointer.save({}, "# config\n");
}

std::string error_of(const kiln::app::ExportCommand& cmd) {
  return kiln::test::input_error_of([&] { run_export(cmd); });
}

}  // namespace

TEST_CASE("export writes every tensor and data.json in each format", "[app][export]") {
  kiln::test::TempDir tmp;
  torch::manual_seed(1);
  Tiny model;
  const auto checkpoint = make_run(tmp / "run", model);
  const auto state = kiln::safetensors::load_file(checkpoint + "/model.safetensors").tensors;
  REQUIRE(state.size() == 3);

  REQUIRE(run_export({tmp / "run", "safetensors", tmp / "out/m.safetensors"}) == 0);  // the run: its newest
  REQUIRE(run_export({checkpoint, "npy", tmp / "out/npy"}) == 0);
  REQUIRE(run_export({checkpoint + "/", "torch", tmp / "out/m.pt"}) == 0);

  const auto st = kiln::safetensors::load_file(tmp / "out/m.safetensors");
  REQUIRE(st.metadata.at("kiln.data") == kDataJson);
  const auto pt = kiln::torch_pickle::load_file(tmp / "out/m.pt").toGenericDict();
  REQUIRE(kiln::torch_pickle::read_record(tmp / "out/m.pt", "kiln_data.json") == kDataJson);
  REQUIRE(kiln::files::read(tmp / "out/npy/data.json") == kDataJson);
  REQUIRE(st.tensors.size() == state.size());
  REQUIRE(pt.size() == state.size());
  for (const auto& [name, t] : state) {
    INFO(name);
    const auto from_st = std::find_if(st.tensors.begin(), st.tensors.end(),
                                      [&](const auto& p) { return p.first == name; });
    REQUIRE(from_st != st.tensors.end());
    REQUIRE(from_st->second.scalar_type() == t.scalar_type());
    REQUIRE(torch::equal(from_st->second, t));
    REQUIRE(pt.at(name).toTensor().scalar_type() == t.scalar_type());
    REQUIRE(torch::equal(pt.at(name).toTensor(), t));
    const auto npy = kiln::data::read_npy(tmp / ("out/npy/" + name + ".npy"));
    const auto want = t.scalar_type() == at::kBFloat16 ? t.to(at::kFloat) : t;  // exact
    REQUIRE(npy.scalar_type() == want.scalar_type());
    REQUIRE(torch::equal(npy, want));
  }

  const auto py = kiln::test::python_or_skip("torch, numpy, safetensors.torch");
  if (!py) return;
  std::ofstream(tmp / "check.py") << R"(import json, os, sys, zipfile
import numpy as np, torch
from safetensors import safe_open
from safetensors.torch import load_file
d, ckpt, data = sys.argv[1], sys.argv[2], sys.argv[3]
want = load_file(os.path.join(ckpt, "model.safetensors"))
pt = torch.load(os.path.join(d, "m.pt"), weights_only=True)
st = load_file(os.path.join(d, "m.safetensors"))
assert sorted(pt) == sorted(st) == sorted(want), (list(pt), list(want))
for k, v in want.items():
    assert pt[k].dtype == st[k].dtype == v.dtype and torch.equal(pt[k], v) and torch.equal(st[k], v), k
    a = np.load(os.path.join(d, "npy", k + ".npy"))
    assert np.array_equal(a, v.float().numpy() if v.dtype == torch.bfloat16 else v.numpy()), k
with safe_open(os.path.join(d, "m.safetensors"), "pt") as f:
    assert f.metadata()["kiln.data"] == data
with zipfile.ZipFile(os.path.join(d, "m.pt")) as z:
    [name] = [n for n in z.namelist() if n.endswith("/kiln_data.json")]
    assert z.read(name).decode() == data
)";
  const std::string cmd = *py + " " + (tmp / "check.py") + " " + (tmp / "out") + " " + checkpoint +
                          " '" + kDataJson + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
}

TEST_CASE("export refuses bad input naming it and leaves no output behind", "[app][export]") {
  kiln::test::TempDir tmp;
  torch::manual_seed(2);
  Tiny model;
  const auto checkpoint = make_run(tmp / "run", model);
  const auto nothing_written = [&] {
    for (const auto& e : fs::directory_iterator(tmp.path()))
      if (e.path().filename() != "run") return false;
    return true;
  };

  REQUIRE_THAT(error_of({tmp / "none", "torch", tmp / "m.pt"}),
               Contains(tmp / "none" + ": CHECKPOINT: expected a checkpoint directory (with "
                        "manifest.json) or a run directory (with checkpoints/), found nothing"));
  REQUIRE_THAT(error_of({checkpoint, "onnx", tmp / "m.onnx"}),
               Contains("--format: expected one of safetensors, npy, torch, found \"onnx\""));
  REQUIRE_THAT(error_of({checkpoint, "torch", ""}), Contains("--out: expected the path"));

  // A damaged data.json, then a damaged model: the manifest's CRC-32 catches both.
  kiln::files::write_synced(checkpoint + "/data.json", "{\"mean\": 1}");
  REQUIRE_THAT(error_of({checkpoint, "npy", tmp / "npy"}),
               Contains(checkpoint + "/data.json: truncated or corrupted"));
  kiln::files::write_synced(checkpoint + "/data.json", kDataJson);
  const std::string weights = kiln::files::read(checkpoint + "/model.safetensors");
  kiln::files::write_synced(checkpoint + "/model.safetensors", weights.substr(0, 100));
  REQUIRE_THAT(error_of({checkpoint, "torch", tmp / "m.pt"}),
               Contains(checkpoint + "/model.safetensors: truncated or corrupted"));
  REQUIRE(nothing_written());
  kiln::files::write_synced(checkpoint + "/model.safetensors", weights);

  // An existing --out: refused without --force; with it, replaced only by its own kind.
  REQUIRE(run_export({checkpoint, "torch", tmp / "m.pt"}) == 0);
  REQUIRE_THAT(error_of({checkpoint, "torch", tmp / "m.pt"}),
               Contains(tmp / "m.pt" + ": --out: already exists; give --force to replace it"));
  REQUIRE(run_export({checkpoint, "torch", tmp / "m.pt", /*force=*/true}) == 0);
  REQUIRE_THAT(error_of({checkpoint, "npy", tmp / "m.pt", true}),
               Contains("--out --force: replaces an earlier npy export only"));
  // --force replaces a file of its format only, and nothing inside a checkpoint: the
  // checkpoint's own model.safetensors is one (its manifest's size and CRC would then
  // fail the resume), and a file beside the run's is not an earlier export.
  const std::string own = checkpoint + "/model.safetensors";
  for (const auto& [format, out] : std::vector<std::pair<std::string, std::string>>{
           {"safetensors", own}, {"torch", own}, {"npy", checkpoint + "/npy"}, {"torch", checkpoint + "/new.pt"}}) {
    INFO(format << " " << out);
    REQUIRE_THAT(error_of({checkpoint, format, out, true}),
                 Contains(out + ": --out: expected a path outside a checkpoint, found one inside " + checkpoint));
  }
  REQUIRE(kiln::files::read(own) == weights);
  // Another program's manifest.json makes no checkpoint: a folder holding one takes an export.
  fs::create_directories(tmp / "webapp");
  std::ofstream(tmp / "webapp/manifest.json") << "{\"name\": \"my app\"}";
  REQUIRE(run_export({checkpoint, "torch", tmp / "webapp/m.pt"}) == 0);
  kiln::files::remove_tree(tmp / "webapp");
  REQUIRE_FALSE(fs::exists(checkpoint + "/npy"));
  REQUIRE_FALSE(fs::exists(checkpoint + "/new.pt"));
  std::ofstream(tmp / "notes.safetensors") << "my notes, not a safetensors file";
  REQUIRE_THAT(error_of({checkpoint, "safetensors", tmp / "notes.safetensors", true}),
               Contains("--out --force: replaces an earlier safetensors export only (a file), found a file "
                        "that is not safetensors"));
  REQUIRE_THAT(error_of({checkpoint, "torch", tmp / "notes.safetensors", true}),
               Contains("found a file that is not torch"));
  REQUIRE(kiln::files::read(tmp / "notes.safetensors") == "my notes, not a safetensors file");
  fs::remove(tmp / "notes.safetensors");
  REQUIRE(run_export({checkpoint, "safetensors", tmp / "m.safetensors"}) == 0);
  REQUIRE(run_export({checkpoint, "safetensors", tmp / "m.safetensors", true}) == 0);
  REQUIRE_THAT(error_of({checkpoint, "torch", tmp / "m.safetensors", true}), Contains("found a file that is not torch"));
  fs::remove(tmp / "m.safetensors");
  REQUIRE(run_export({checkpoint, "npy", tmp / "npy/"}) == 0);  // a directory named with its slash
  REQUIRE(run_export({checkpoint, "npy", tmp / "npy", true}) == 0);
  std::ofstream(tmp / "npy/notes.txt") << "mine";
  REQUIRE_THAT(error_of({checkpoint, "npy", tmp / "npy", true}),
               Contains("found a directory holding notes.txt"));
  REQUIRE(kiln::files::read(tmp / "npy/notes.txt") == "mine");
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(tmp.path())) left.push_back(e.path().filename());
  std::sort(left.begin(), left.end());
  REQUIRE(left == std::vector<std::string>{"m.pt", "npy", "run"});  // no temporaries
}

TEST_CASE("export --best takes the run's best checkpoint by its checkpoint.best metric", "[app][export]") {
  kiln::test::TempDir tmp;
  Tiny model;
  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.1));
  const std::string run = tmp / "run";
  kiln::train::Checkpointer checkpointer(run, model, optimizer);
  // Steps 10, 20, 30: the best accuracy is step 20's, the best (lowest) loss step 30's;
  // step 40 was not evaluated.
  const std::vector<std::pair<double, double>> scores = {{0.7, 0.9}, {0.9, 0.5}, {0.8, 0.4}};
  for (size_t i = 0; i < scores.size(); ++i) {
    kiln::train::TrainPosition at;
    at.step = 10 * static_cast<int64_t>(i + 1);
    checkpointer.save(at, "", {{"test_accuracy", scores[i].first}, {"test_loss", scores[i].second}});
  }
  kiln::train::TrainPosition last;
  last.step = 40;
  checkpointer.save(last, "", {});
  const auto config = [&](const std::string& text) { std::ofstream(tmp / "run/config.toml") << text; };
  const auto step_dir = [&](int step) { return run + "/checkpoints/step_0000000" + std::to_string(step); };

  kiln::app::ExportCommand cmd;
  cmd.checkpoint = run;
  cmd.format = "safetensors";
  cmd.out = tmp / "best.safetensors";
  cmd.best = true;
  config("[checkpoint]\nbest = \"test_accuracy\"\n");
  REQUIRE(kiln::app::checkpoint_argument(run, true).dir == step_dir(20));
  REQUIRE(kiln::app::checkpoint_argument(run, true).why == "the best test_accuracy (0.9) of 4 checkpoints");
  REQUIRE(kiln::app::checkpoint_argument(run, false).dir == step_dir(40));  // the newest
  REQUIRE(run_export(cmd) == 0);
  REQUIRE(fs::exists(cmd.out));
  config("[checkpoint]\nbest = \"test_loss\"\n");
  REQUIRE(kiln::app::checkpoint_argument(run, true).dir == step_dir(30));

  // No choice: a checkpoint directory, a run that ranked none, a metric no checkpoint has.
  CHECK_THAT(kiln::test::input_error_of([&] { kiln::app::checkpoint_argument(step_dir(10), true); }),
             Contains("--best: expected a run directory (with checkpoints/), found a checkpoint directory"));
  config("[checkpoint]\nbest = \"\"\n");
  CHECK_THAT(kiln::test::input_error_of([&] { kiln::app::checkpoint_argument(run, true); }),
             Contains("config.toml: checkpoint.best = \"\": the run ranked no checkpoint"));
  config("[checkpoint]\nbest = \"test_r2\"\n");
  CHECK_THAT(kiln::test::input_error_of([&] { kiln::app::checkpoint_argument(run, true); }),
             Contains("--best: expected a checkpoint that records test_r2 (one written right after an "
                      "evaluation), found none of the 4"));
  fs::remove(tmp / "run/config.toml");
  CHECK_THAT(kiln::test::input_error_of([&] { kiln::app::checkpoint_argument(run, true); }),
             Contains("config.toml: --best: expected the run's config"));
}
