// Checkpoint directories: weights as a name → tensor dict (torch.load reads it),
// the optimizer through its own save/load, the position and RNG in trainer.pt.
#include "train/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fcntl.h>
#include <torch/serialize.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "util/error.h"

namespace kiln::train {
namespace fs = std::filesystem;
namespace {

const std::regex kStepDir(R"(step_(\d+))");

void fsync_path(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

void write_bytes(const fs::path& p, const std::vector<char>& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  TORCH_CHECK(out.good(), "cannot write ", p.string());
}

std::vector<char> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw InputError(c10::str(p.string(), ": no such file in the checkpoint"));
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Every parameter and buffer, by its full dotted name.
std::vector<std::pair<std::string, at::Tensor>> named_state(const torch::nn::Module& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : model.named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : model.named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

std::vector<char> model_bytes(const torch::nn::Module& model) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, t] : named_state(model)) dict.insert(name, t.detach().cpu());
  return torch::pickle_save(dict);
}

void load_model(const fs::path& file, torch::nn::Module& model) {
  c10::IValue value;
  try {
    value = torch::pickle_load(read_bytes(file));
  } catch (const c10::Error& e) {
    throw InputError(c10::str(file.string(), ": not a readable weights file (",
                              e.what_without_backtrace(), ")"));
  }
  if (!value.isGenericDict())
    throw InputError(c10::str(file.string(), ": expected a dict of name → tensor, found ",
                              value.tagKind()));
  const auto dict = value.toGenericDict();
  const auto state = named_state(model);
  // Check everything before touching the model.
  for (const auto& [name, t] : state) {
    const auto it = dict.find(name);
    if (it == dict.end())
      throw InputError(c10::str(file.string(), ": has no tensor '", name,
                                "', which the model has (a checkpoint of another model?)"));
    if (!it->value().isTensor())
      throw InputError(c10::str(file.string(), ": '", name, "' is not a tensor"));
    const auto saved = it->value().toTensor();
    if (saved.sizes() != t.sizes() || saved.scalar_type() != t.scalar_type())
      throw InputError(c10::str(file.string(), ": '", name, "' is ", saved.scalar_type(),
                                saved.sizes(), " but the model's is ", t.scalar_type(), t.sizes()));
  }
  if (dict.size() != state.size())
    throw InputError(c10::str(file.string(), ": holds ", dict.size(), " tensors, the model has ",
                              state.size(), " (a checkpoint of another model?)"));
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : state) t.copy_(dict.at(name).toTensor());
}

}  // namespace

std::string save_checkpoint(const std::string& run_dir, const TrainPosition& position,
                            const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                            const std::string& config_toml) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  fs::create_directories(root);
  char name[32];
  std::snprintf(name, sizeof name, "step_%09lld", static_cast<long long>(position.step));
  const fs::path final_dir = root / name;
  const fs::path tmp = root / (std::string(".tmp-") + name);
  fs::remove_all(tmp);
  fs::create_directories(tmp);

  write_bytes(tmp / "model.pt", model_bytes(model));
  {
    torch::serialize::OutputArchive ar;
    optimizer.save(ar);
    ar.save_to((tmp / "optimizer.pt").string());
  }
  {
    torch::serialize::OutputArchive ar;
    ar.write("step", c10::IValue(position.step));
    ar.write("epoch", c10::IValue(position.epoch));
    ar.write("batch", c10::IValue(position.batch));
    ar.write("rng_cpu", at::detail::getDefaultCPUGenerator().get_state());
    ar.save_to((tmp / "trainer.pt").string());
  }
  write_bytes(tmp / "config.toml", std::vector<char>(config_toml.begin(), config_toml.end()));
  for (const auto& f : fs::directory_iterator(tmp)) fsync_path(f.path());
  fsync_path(tmp);

  // Swap into place: an existing directory of the same step is replaced only
  // once the new one is complete.
  const fs::path old = root / (std::string(".old-") + name);
  fs::remove_all(old);
  if (fs::exists(final_dir)) fs::rename(final_dir, old);
  fs::rename(tmp, final_dir);
  fsync_path(root);
  fs::remove_all(old);
  return final_dir.string();
}

std::optional<std::string> latest_checkpoint(const std::string& run_dir) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  if (!fs::is_directory(root)) return std::nullopt;
  std::optional<std::string> best;
  long long best_step = -1;
  std::smatch m;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || !std::regex_match(name, m, kStepDir)) continue;
    const long long step = std::stoll(m[1]);
    if (step > best_step) best_step = step, best = entry.path().string();
  }
  return best;
}

TrainPosition load_checkpoint(const std::string& checkpoint_dir, torch::nn::Module& model,
                              torch::optim::Optimizer& optimizer) {
  const fs::path dir(checkpoint_dir);
  if (!fs::is_directory(dir))
    throw InputError(c10::str(checkpoint_dir, ": expected a checkpoint directory, found none"));
  TrainPosition pos;
  at::Tensor rng;
  torch::serialize::InputArchive trainer, optim;
  try {
    trainer.load_from((dir / "trainer.pt").string());
    c10::IValue v;
    for (auto [key, dst] : {std::pair{"step", &pos.step}, {"epoch", &pos.epoch}, {"batch", &pos.batch}}) {
      if (!trainer.try_read(key, v) || !v.isInt())
        throw InputError(c10::str((dir / "trainer.pt").string(), ": missing integer '", key, "'"));
      *dst = v.toInt();
    }
    trainer.read("rng_cpu", rng);
    optim.load_from((dir / "optimizer.pt").string());
  } catch (const c10::Error& e) {
    throw InputError(c10::str(checkpoint_dir, ": damaged checkpoint (", e.what_without_backtrace(),
                              ")"));
  }
  load_model(dir / "model.pt", model);
  try {
    optimizer.load(optim);
  } catch (const c10::Error& e) {
    throw InputError(c10::str((dir / "optimizer.pt").string(), ": ", e.what_without_backtrace()));
  }
  auto gen = at::detail::getDefaultCPUGenerator();  // a handle sharing the global generator
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(rng);
  return pos;
}

}  // namespace kiln::train
