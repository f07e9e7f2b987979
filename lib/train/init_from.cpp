// init_from(): check every name and shape first, then copy, so a refused file
// leaves the model as it was.
#include "train/init_from.h"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>

#include "train/checkpoint.h"
#include "util/error.h"
#include "util/safetensors.h"

namespace kiln::train {

int64_t init_from(torch::nn::Module& model, const std::string& path) {
  namespace fs = std::filesystem;
  std::string file = path;
  if (fs::is_directory(fs::path(path) / "checkpoints")) {  // a run directory: its newest checkpoint
    const auto newest = latest_checkpoint(path);
    if (!newest)
      throw InputError(c10::str("model.init_from: ", path, ": expected a complete checkpoint under checkpoints/, "
                                "found none"));
    file = (fs::path(*newest) / "model.safetensors").string();
  } else if (fs::is_directory(path)) {
    file = (fs::path(path) / "model.safetensors").string();
  }
  if (!fs::is_regular_file(file))
    throw InputError(c10::str("model.init_from: expected a .safetensors file, a checkpoint directory or a run "
                              "directory (its newest checkpoint), found ",
                              !fs::exists(path)        ? "nothing at "
                              : fs::is_directory(path) ? "a directory with neither model.safetensors nor "
                                                         "checkpoints/ at "
                                                       : "",
                              path));
  const auto contents = safetensors::load_file(file);
  std::map<std::string, at::Tensor> saved(contents.tensors.begin(), contents.tensors.end());

  std::map<std::string, at::Tensor> own;
  for (const auto& p : model.named_parameters()) own[p.key()] = p.value();
  for (const auto& b : model.named_buffers()) own[b.key()] = b.value();
  std::string missing, unexpected, misshaped;
  const auto add = [](std::string& list, const std::string& item) {
    list += (list.empty() ? "" : ", ") + item;
  };
  for (const auto& [name, t] : own) {
    const auto it = saved.find(name);
    if (it == saved.end()) add(missing, name);
    else if (it->second.sizes() != t.sizes())
      add(misshaped, c10::str(name, " (file ", it->second.sizes(), ", model ", t.sizes(), ")"));
  }
  for (const auto& [name, t] : saved)
    if (!own.count(name)) add(unexpected, name);
  if (!missing.empty() || !unexpected.empty() || !misshaped.empty()) {
    std::string what;
    if (!missing.empty()) what += "\n  missing from the file (the model has them): " + missing;
    if (!unexpected.empty()) what += "\n  unexpected (the model has no such tensor): " + unexpected;
    if (!misshaped.empty()) what += "\n  shapes differ: " + misshaped;
    throw InputError(c10::str(file, ": model.init_from: the file's tensors do not match the "
                              "model's by name and shape:", what));
  }
  // NaN or inf weights would train to a NaN loss at the first step, blamed on the
  // learning rate: the file's to fix, named with the tensor and the place.
  for (const auto& [name, t] : own) {
    const auto& v = saved.at(name);
    if (!at::isFloatingType(v.scalar_type())) continue;
    const auto finite = at::isfinite(v);
    if (!finite.all().item<bool>()) {
      const int64_t i = (~finite).flatten().nonzero()[0].item<int64_t>();
      throw InputError(c10::str(file, ": model.init_from: tensor '", name, "': expected finite values, found ",
                                v.flatten()[i].item<double>(), " at flat index ", i));
    }
  }
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : own) t.copy_(saved.at(name));
  return static_cast<int64_t>(own.size());
}

}  // namespace kiln::train
