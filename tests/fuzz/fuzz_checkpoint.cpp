// Fuzz target: a checkpoint's files as `--resume` reads them — manifest.json,
// trainer.pt, optimizer.pt (AdamW), schedule.pt, scaler.pt, model.safetensors and
// data.json. A real checkpoint of a small run is written once; each input replaces one
// of its files (the first byte picks which, the rest is the file) and, unless it is the
// manifest, the manifest's size and CRC-32 of that file are updated, so that the
// parsers themselves are reached rather than the CRC check. Then Checkpointer::load and
// read_data_schema: bad files must be kiln::InputError (exit 2) naming the file.
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "fuzz_support.h"
#include "nn/mlp.h"
#include "optim/adamw.h"
#include "optim/schedule.h"
#include "train/amp.h"
#include "train/checkpoint.h"
#include "train/trainer.h"
#include "util/files.h"

namespace {

namespace fs = std::filesystem;

struct Fixture {
  kiln::nn::Mlp model{kiln::nn::MlpOptions(4, {3}, 2)};
  kiln::optim::AdamW optimizer{model->parameters()};
  kiln::optim::LrSchedule schedule{
      optimizer, kiln::optim::ScheduleOptions().kind("cosine").warmup_steps(2).total_steps(10)};
  kiln::train::GradScaler scaler;
  kiln::train::Checkpointer checkpointer;
  std::string dir;
  std::map<std::string, std::string> original;  // file → bytes
  nlohmann::json manifest;

  Fixture() : checkpointer((kiln::fuzz::scratch() / "run").string(), *model, optimizer) {
    checkpointer.add_part({"schedule", [this](auto& ar) { schedule.save(ar); },
                           [this](auto& ar) { schedule.load(ar); }});
    checkpointer.add_part({"scaler", [this](auto& ar) { scaler.save(ar); },
                           [this](auto& ar) { scaler.load(ar); }});
    kiln::data::DataSchema schema;
    schema.format = "npy";
    schema.input_shape = {4};
    schema.outputs = 2;
    schema.classes = {"a", "b"};
    schema.transform = {{"mean", {0.0, 0.0, 0.0, 0.0}}, {"std", {1.0, 1.0, 1.0, 1.0}}};
    checkpointer.add_file(kiln::train::kDataFile, schema.to_json().dump(2) + "\n");
    torch::manual_seed(0);
    model->forward(torch::randn({5, 4})).pow(2).mean().backward();
    optimizer.step();
    schedule.step();
    dir = checkpointer.save({1, 0, 1, 7, 0.5, 1}, "[run]\nname = 'fuzz'\n", {{"test_loss", 0.25}});
    for (const auto& entry : fs::directory_iterator(dir))
      original[entry.path().filename().string()] = kiln::files::read(entry.path().string());
    manifest = nlohmann::json::parse(original.at("manifest.json"));
  }

  std::string changed;  // the file the last input replaced

  // Puts back the file the last input replaced, and the manifest.
  void restore() {
    if (changed.empty()) return;
    kiln::fuzz::write_file(dir + "/" + changed, original.at(changed));
    kiln::fuzz::write_file(dir + "/manifest.json", original.at("manifest.json"));
    changed.clear();
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

const char* const kFiles[] = {"manifest.json", "trainer.pt",        "optimizer.pt", "schedule.pt",
                              "scaler.pt",     "model.safetensors", "data.json"};

}  // namespace

// KILN_FUZZ_WRITE_SEEDS=DIR writes the checkpoint's files as seed inputs (selector byte
// + the file as kiln wrote it) into DIR: tests/fuzz/make_corpus.py uses it.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  Fixture& f = fixture();
  if (const char* seeds = std::getenv("KILN_FUZZ_WRITE_SEEDS")) {
    for (size_t i = 0; i < std::size(kFiles); ++i) {
      std::string seed(1, static_cast<char>(i));
      seed += f.original.at(kFiles[i]);
      kiln::files::write_synced(std::string(seeds) + "/" + kFiles[i], seed);
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Fixture& f = fixture();
  const std::string file = kFiles[data[0] % std::size(kFiles)];
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  f.restore();
  f.changed = file;
  kiln::fuzz::write_file(f.dir + "/" + file, bytes);
  if (file != "manifest.json") {
    auto m = f.manifest;
    m["files"][file] = {{"bytes", bytes.size()}, {"crc32", kiln::files::crc32(bytes)}};
    kiln::fuzz::write_file(f.dir + "/manifest.json", m.dump(2));
  }
  kiln::fuzz::only_input_errors([&] {
    f.checkpointer.load(f.dir);
    kiln::train::read_data_schema(f.dir);
  });
  return 0;
}
