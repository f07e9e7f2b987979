// The example configs of each data format (configs/penguins_*.toml: CSV classification
// and regression; configs/arrays_npy.toml: NumPy) run end to end through `kiln train`'s
// own code on small data the test writes: the run learns, names its metrics, saves the
// schema with the run, its checkpoints and the weights' metadata, and a CSV run stopped
// and resumed ends bit for bit where a straight one does.
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "data/npy.h"
#include "data/fashion_mnist.h"
#include "data/npz.h"
#include "run_files.h"
#include "support.h"
#include "train/checkpoint.h"

namespace {

namespace fs = std::filesystem;

// A penguin-like table: species follow from the measurements; a few rows have NA, a
// quoted field and a CRLF line end, as exported tables do.
std::string write_penguins(const kiln::test::TempDir& dir, int rows = 240) {
  std::mt19937 rng(11);
  std::normal_distribution<double> noise(0.0, 1.0);
  const char* species[] = {"Adelie", "Chinstrap", "Gentoo"};
  const char* islands[] = {"Biscoe", "Dream", "Torgersen"};
  std::ostringstream s;
  s << "species,island,bill_length_mm,bill_depth_mm,flipper_length_mm,body_mass_g,sex,year\r\n";
  for (int i = 0; i < rows; ++i) {
    const int k = i % 3;
    const double bill = 38.0 + 6.0 * k + 1.5 * noise(rng);
    const double depth = 18.5 - 2.0 * (k == 2) + 0.6 * noise(rng);
    const double flipper = 190.0 + 12.0 * k + 4.0 * noise(rng);
    const double mass = 3700.0 + 40.0 * (flipper - 190.0) + 150.0 * noise(rng);
    const bool na = i % 37 == 5;
    s << species[k] << ",\"" << islands[(k + i / 3) % 3] << "\"," << bill << ',' << depth << ','
      << (na ? std::string("NA") : std::to_string(flipper)) << ',' << std::lround(mass) << ','
      << (i % 2 ? "male" : "female") << ',' << 2007 + i % 3 << (i % 5 ? "\n" : "\r\n");
  }
  const auto path = dir / "penguins.csv";
  std::ofstream(path, std::ios::binary) << s.str();
  return path;
}

using kiln::test::train;

using kiln::test::last_test_line;

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("configs/penguins_species.toml: a CSV classifier trains from config and saves its schema",
          "[train][data][csv]") {
  kiln::test::TempDir dir;
  const auto csv = write_penguins(dir);
  const auto run = dir / "run";
  REQUIRE(train("configs/penguins_species.toml", run,
                {"data.train=" + csv, "train.epochs=15", "train.threads=1"}) == 0);
  const auto test = last_test_line(run);
  INFO(test.dump());
  REQUIRE(test["accuracy"].get<double>() > 0.9);
  REQUIRE(test["per_class_accuracy"].size() == 3);
  REQUIRE(test["per_class_accuracy"].contains("Gentoo"));
  // The schema: in the run, in the checkpoint (manifest-checked) and in the weights' metadata.
  const auto schema = read_json(run + "/data.json");
  REQUIRE(schema["classes"] == nlohmann::json({"Adelie", "Chinstrap", "Gentoo"}));
  REQUIRE(schema["input_shape"] == nlohmann::json({3 + 4 + 2}));  // 3 islands, 4 numbers, 2 sexes
  const auto ckpt = kiln::train::latest_checkpoint(run);
  REQUIRE(ckpt);
  REQUIRE(nlohmann::json::parse(*kiln::train::read_checkpoint_file(*ckpt, "data.json")) == schema);
  const auto weights = kiln::safetensors::load_file(*ckpt + "/model.safetensors");
  REQUIRE(nlohmann::json::parse(weights.metadata.at("kiln.data")) == schema);
  // The manifest names the metric it records.
  const auto manifest = read_json(*ckpt + "/manifest.json");
  REQUIRE(manifest["metrics"].contains("test_accuracy"));
}

TEST_CASE("configs/penguins_mass.toml: a CSV regression reports RMSE in the target's units and R²",
          "[train][data][csv]") {
  kiln::test::TempDir dir;
  const auto csv = write_penguins(dir);
  const auto run = dir / "run";
  REQUIRE(train("configs/penguins_mass.toml", run,
                {"data.train=" + csv, "train.epochs=30", "train.threads=1"}) == 0);
  const auto test = last_test_line(run);
  INFO(test.dump());
  REQUIRE_FALSE(test.contains("accuracy"));
  REQUIRE(test["r2"].get<double>() > 0.8);
  // The noise is 150 g around a mass that depends on the flipper: RMSE in grams.
  REQUIRE(test["rmse"].get<double>() > 100.0);
  REQUIRE(test["rmse"].get<double>() < 400.0);
  const auto ckpt = kiln::train::latest_checkpoint(run);
  REQUIRE(read_json(*ckpt + "/manifest.json")["metrics"].contains("test_rmse"));
  const auto best = kiln::train::best_checkpoint(run, "test_rmse", kiln::train::MetricMode::kMin);
  REQUIRE(best);
  REQUIRE(read_json(run + "/data.json")["task"] == "regression");
}

TEST_CASE("configs/arrays_npy.toml: NumPy arrays train from config", "[train][data][npy]") {
  kiln::test::TempDir dir;
  torch::manual_seed(2);
  // Four classes in 2×8 inputs: the class shifts one block of the input.
  const auto y = at::randint(0, 4, {600}, at::kLong);
  auto x = at::randn({600, 2, 8});
  x.view({600, 16}).scatter_add_(1, (y * 4).unsqueeze(1), at::full({600, 1}, 4.0f));
  kiln::data::write_npy(dir / "x.npy", x);
  kiln::data::write_npy(dir / "y.npy", y.to(at::kShort));
  const auto run = dir / "run";
  REQUIRE(train("configs/arrays_npy.toml", run,
                {"data.train=" + (dir / "x.npy"), "data.train_targets=" + (dir / "y.npy"),
                 "train.epochs=5", "train.threads=1"}) == 0);
  const auto test = last_test_line(run);
  INFO(test.dump());
  REQUIRE(test["accuracy"].get<double>() > 0.9);
  REQUIRE(read_json(run + "/data.json")["input_shape"] == nlohmann::json({2, 8}));
}

TEST_CASE("a CSV run stopped and resumed ends bit for bit where a straight run does",
          "[train][data][csv]") {
  kiln::test::TempDir dir;
  const auto csv = write_penguins(dir);
  const std::vector<std::string> common = {"data.train=" + csv, "train.epochs=4",
                                           "train.threads=1", "optim.name=adamw"};
  // The straight run assembles batches in the loop, the stopped and resumed one on
  // the prefetching worker: the same batches either way.
  auto straight = common;
  straight.push_back("train.prefetch=0");
  REQUIRE(train("configs/penguins_species.toml", dir / "straight", straight) == 0);
  auto stopped = common;
  stopped.push_back("train.prefetch=2");
  stopped.push_back("train.max_steps=9");  // mid-epoch (6 batches an epoch)
  REQUIRE(train("configs/penguins_species.toml", dir / "resumed", stopped) == 0);
  REQUIRE(train("", "", {"train.max_steps=0", "train.prefetch=3"}, dir / "resumed") == 0);
  REQUIRE(kiln::test::final_weights_differ(dir / "straight", dir / "resumed") == "");
}

TEST_CASE("model.init_from starts a fresh run from another run's checkpoint",
          "[train][data][init_from]") {
  kiln::test::TempDir dir;
  const auto csv = write_penguins(dir);
  const std::vector<std::string> common = {"data.train=" + csv, "train.threads=1"};
  auto first = common;
  first.push_back("train.epochs=15");
  REQUIRE(train("configs/penguins_species.toml", dir / "first", first) == 0);
  const auto trained = *kiln::train::latest_checkpoint(dir / "first");
  // One step at learning rate ~0 from the trained weights keeps their accuracy.
  auto second = common;
  for (const auto& s : {"train.epochs=1", "train.max_steps=1", "optim.lr=1e-12"}) second.push_back(s);
  second.push_back("model.init_from=" + trained);
  REQUIRE(train("configs/penguins_species.toml", dir / "second", second) == 0);
  const auto a = last_test_line(dir / "first");
  const auto w = kiln::test::checkpoint_weights(*kiln::train::latest_checkpoint(dir / "second"));
  const auto v = kiln::test::checkpoint_weights(trained);
  for (size_t i = 0; i < w.size(); ++i) {
    INFO(w[i].first);
    REQUIRE(at::allclose(w[i].second, v[i].second, 0, 1e-6));
  }
  REQUIRE(a["accuracy"].get<double>() > 0.9);
}

TEST_CASE("configs/text_chars.toml: a next-character model trains on a UTF-8 folder",
          "[train][data][text]") {
  kiln::test::TempDir dir;
  fs::create_directories(dir / "corpus");
  // A pattern an MLP over the 32 characters before can learn, in two files, non-ASCII too.
  std::string a, b;
  for (int i = 0; i < 200; ++i) a += "the cat sat on the mat. ça va très bien. ";
  for (int i = 0; i < 60; ++i) b += "the cat sat on the mat. ça va très bien. ";
  std::ofstream(dir / "corpus/a.txt") << a;
  std::ofstream(dir / "corpus/b.txt") << b;
  const auto run = dir / "run";
  REQUIRE(train("configs/text_chars.toml", run,
                {"data.train=" + (dir / "corpus"), "train.epochs=2", "train.threads=1",
                 "data.stride=2"}) == 0);
  const auto test = last_test_line(run);
  INFO(test.dump());
  REQUIRE(test["accuracy"].get<double>() > 0.9);
  const auto schema = read_json(run + "/data.json");
  REQUIRE(schema["format"] == "text");
  REQUIRE(schema["transform"]["vocabulary"]["characters"].get<std::string>().find("ç") !=
          std::string::npos);
}

TEST_CASE("an .npz archive with arrays x and y trains as data.format npy", "[train][data][npy]") {
  kiln::test::TempDir dir;
  torch::manual_seed(4);
  const auto x = at::randn({300, 5});
  const auto y = (x.select(1, 0) * 3 - x.select(1, 1)).to(at::kDouble);  // a linear target
  kiln::data::write_npz(dir / "d.npz", {{"x", x}, {"y", y}});
  const auto run = dir / "run";
  REQUIRE(train("configs/arrays_npy.toml", run,
                {"data.train=" + (dir / "d.npz"), "data.train_targets=", "train.epochs=20",
                 "train.threads=1"}) == 0);
  const auto test = last_test_line(run);
  INFO(test.dump());
  REQUIRE(test["r2"].get<double>() > 0.95);
}

TEST_CASE("Python reproduces kiln's test accuracy from model.safetensors and the schema it carries",
          "[train][data][interop]") {
  const auto py = kiln::test::python_or_skip("torch, numpy, safetensors");
  if (!py) return;
  kiln::test::TempDir dir;
  const auto run = dir / "run";
  REQUIRE(train("configs/tiny.toml", run, {"train.threads=1"}) == 0);
  const auto test = last_test_line(run);
  const auto ckpt = *kiln::train::latest_checkpoint(run);
  // The user's side: the weights, the transform from their metadata, the raw IDX test
  // images (the first 1000, tiny.toml's test_limit), and a plain PyTorch forward pass.
  std::ofstream(dir / "check.py") << R"(import gzip, json, sys
import numpy as np, torch
from safetensors import safe_open
ckpt, root, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
with safe_open(ckpt + "/model.safetensors", "pt") as f:
    w = {k: f.get_tensor(k) for k in f.keys()}
    schema = json.loads(f.metadata()["kiln.data"])
t = schema["transform"]
def idx(name):
    b = gzip.open(f"{root}/{name}.gz").read()
    dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(b[3])]
    return np.frombuffer(b, np.uint8, offset=4 + 4 * len(dims)).reshape(dims)
pixels = torch.tensor(idx("t10k-images-idx3-ubyte")[:limit].reshape(limit, -1), dtype=torch.float32)
labels = torch.tensor(idx("t10k-labels-idx1-ubyte")[:limit].astype(np.int64))
def accuracy(x):
    n = len([k for k in w if k.endswith(".weight")])
    for i in range(n):
        x = x @ w[f"layers.{i}.weight"].T + w[f"layers.{i}.bias"]
        if i < n - 1: x = torch.relu(x)
    return (x.argmax(1) == labels).double().mean().item()
print(accuracy((pixels * t["scale"] - t["mean"]) / t["std"]), accuracy(pixels / 255))
)";
  const std::string out = dir / "out.txt";
  const std::string cmd = *py + " " + (dir / "check.py") + " " + ckpt + " " +
                          std::string(kiln::data::kDefaultFashionMnistRoot) + " 1000 > " + out;
  REQUIRE(std::system(cmd.c_str()) == 0);
  double with_schema = 0, without = 0;
  std::ifstream(out) >> with_schema >> without;
  INFO("kiln " << test["accuracy"] << ", Python with the schema " << with_schema
               << ", Python with pixels / 255 " << without);
  // The same 1000 images: the same answers but for float rounding on a knife's edge.
  REQUIRE(std::abs(with_schema - test["accuracy"].get<double>()) <= 0.002);
  REQUIRE(with_schema > without);
}
