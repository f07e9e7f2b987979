// Checkpointer: writes a checkpoint crash-safely (temporary directory, fsync,
// rename) with a manifest of sizes and CRC-32s, and loads one only after every
// file and every tensor has been checked against the run it is loaded into.
#include "train/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <c10/util/StringUtil.h>
#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <torch/cuda.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cctype>
#include <mutex>
#include <set>

#include "train/checkpoint_layout.h"
#include "util/error.h"
#include "util/files.h"
#include "util/safetensors.h"
#include "util/torch_archive.h"

namespace kiln::train {
namespace fs = std::filesystem;
namespace {

using torch::serialize::InputArchive;
using torch::serialize::OutputArchive;

// Every parameter and buffer, by its full dotted name ("layers.0.weight").
safetensors::NamedTensors named_state(const torch::nn::Module& model) {
  safetensors::NamedTensors out;
  for (const auto& p : model.named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : model.named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

// A .pt file that Python's torch.load(weights_only=True) reads as a dict.
std::string archive_bytes(const std::function<void(OutputArchive&)>& fill) {
  OutputArchive ar;
  fill(ar);
  return torch_pickle::serialize_archive(ar);
}

// The default generators: CPU, and one per visible CUDA device.
at::Generator cpu_generator() { return at::detail::getDefaultCPUGenerator(); }
at::Generator cuda_generator(int64_t device) {
  return at::globalContext().defaultGenerator(
      at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device)));
}
int64_t cuda_devices() { return torch::cuda::is_available() ? torch::cuda::device_count() : 0; }

at::Tensor rng_state(at::Generator gen) {  // a handle: copies share the generator
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_rng_state(at::Generator gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

void write_trainer_state(OutputArchive& ar, const TrainPosition& pos) {
  ar.write("step", c10::IValue(pos.step));
  ar.write("epoch", c10::IValue(pos.epoch));
  ar.write("batch", c10::IValue(pos.batch));
  ar.write("shuffle_seed", c10::IValue(static_cast<int64_t>(pos.shuffle_seed)));
  ar.write("loss_since_eval", c10::IValue(pos.loss_since_eval));
  ar.write("steps_since_eval", c10::IValue(pos.steps_since_eval));
  ar.write("rng_cpu", rng_state(cpu_generator()));
  const int64_t devices = cuda_devices();
  ar.write("rng_cuda_devices", c10::IValue(devices));
  for (int64_t d = 0; d < devices; ++d)
    ar.write("rng_cuda_" + std::to_string(d), rng_state(cuda_generator(d)));
}

// What trainer.pt holds, read and checked.
struct TrainerState {
  TrainPosition position;
  at::Tensor rng_cpu;
  std::vector<at::Tensor> rng_cuda;
};

TrainerState read_trainer_state(InputArchive& ar, const std::string& file) {
  const auto read_int = [&](const std::string& key) {
    c10::IValue v;
    if (!ar.try_read(key, v) || !v.isInt())
      throw InputError(c10::str(file, ": ", key, ": expected an integer, found ",
                                v.isNone() ? "nothing" : v.tagKind()));
    return v.toInt();
  };
  const auto read_tensor = [&](const std::string& key) {
    c10::IValue v;
    if (!ar.try_read(key, v) || !v.isTensor())
      throw InputError(c10::str(file, ": ", key, ": expected a tensor, found ",
                                v.isNone() ? "nothing" : v.tagKind()));
    return v.toTensor();
  };
  TrainerState s;
  s.position = {read_int("step"), read_int("epoch"), read_int("batch"),
                static_cast<uint64_t>(read_int("shuffle_seed"))};
  // Absent from checkpoints written before they were kept (see TrainPosition).
  c10::IValue v;
  if (ar.try_read("loss_since_eval", v)) {
    // Not necessarily finite: an fp16 step the scaler skipped may have had an inf loss.
    if (!v.isDouble())
      throw InputError(c10::str(file, ": loss_since_eval: expected a float, found ", v.tagKind()));
    s.position.loss_since_eval = v.toDouble();
    s.position.steps_since_eval = read_int("steps_since_eval");
    if (s.position.steps_since_eval < 0)
      throw InputError(c10::str(file, ": steps_since_eval: expected a count >= 0, found ",
                                s.position.steps_since_eval));
  }
  // A state a generator would refuse is refused now, on a clone of that generator,
  // before the model, the optimizer or any generator changes.
  const auto check_state = [&](const at::Generator& gen, const std::string& key,
                               const at::Tensor& state) {
    try {
      set_rng_state(gen.clone(), state);
    } catch (const c10::Error& e) {  // libtorch's words say what it expected, ours what was found
      throw InputError(c10::str(file, ": ", key, ": ", e.what_without_backtrace(), "; found a ",
                                state.scalar_type(), " tensor of shape ", state.sizes()));
    }
  };
  s.rng_cpu = read_tensor("rng_cpu");
  check_state(cpu_generator(), "rng_cpu", s.rng_cpu);
  const int64_t saved = read_int("rng_cuda_devices");
  if (saved < 0)
    throw InputError(c10::str(file, ": rng_cuda_devices: expected a count >= 0, found ", saved));
  for (int64_t d = 0; d < std::min(saved, cuda_devices()); ++d) {
    const std::string key = "rng_cuda_" + std::to_string(d);
    s.rng_cuda.push_back(read_tensor(key));
    check_state(cuda_generator(d), key, s.rng_cuda.back());
  }
  return s;
}

// The manifest's record of one file, checked against the bytes on disk.
std::string read_verified(const fs::path& dir, const std::string& file,
                          const nlohmann::json& manifest) {
  const std::string path = (dir / file).string();
  const auto& files = manifest.at("files");
  if (!files.contains(file))
    throw InputError(c10::str((dir / layout::kManifest).string(), ": files: expected an entry for ",
                              file, ", found none"));
  const auto& record = files.at(file);
  std::string bytes = files::read(path);
  const auto expected_size = record["bytes"].get<uint64_t>();
  if (bytes.size() != expected_size)
    throw InputError(c10::str(path, ": truncated or corrupted: expected ", expected_size,
                              " bytes (the manifest's), found ", bytes.size()));
  const auto expected_crc = record["crc32"].get<uint64_t>();
  if (files::crc32(bytes) != expected_crc)
    throw InputError(c10::str(path, ": truncated or corrupted: CRC-32 ", files::crc32(bytes),
                              " differs from the manifest's ", expected_crc));
  return bytes;
}

// Checks the file's tensors against the model's, by name, shape and dtype.
void check_model_tensors(const safetensors::NamedTensors& saved,
                         const safetensors::NamedTensors& model, const std::string& path) {
  std::map<std::string, const at::Tensor*> by_name;
  for (const auto& [name, t] : saved) by_name[name] = &t;
  for (const auto& [name, t] : model) {
    const auto it = by_name.find(name);
    if (it == by_name.end())
      throw InputError(c10::str(path, ": has no tensor '", name,
                                "', which the model has (a checkpoint of another model?)"));
    const at::Tensor& s = *it->second;
    if (s.sizes() != t.sizes() || s.scalar_type() != t.scalar_type())
      throw InputError(c10::str(path, ": '", name, "' is ", s.scalar_type(), s.sizes(),
                                " but the model's is ", t.scalar_type(), t.sizes()));
    by_name.erase(it);
  }
  if (!by_name.empty())
    throw InputError(c10::str(path, ": holds tensor '", by_name.begin()->first,
                              "', which the model does not have (a checkpoint of another model?)"));
}

// Puts the complete `tmp` at `final_dir`. Where one exists, the two are swapped
// atomically (renameat2 RENAME_EXCHANGE), so final_dir is always a whole checkpoint.
void install(const fs::path& tmp, const fs::path& final_dir) {
  if (!fs::exists(final_dir)) {
    fs::rename(tmp, final_dir);
    return;
  }
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
    layout::remove_checkpoint_dir(tmp);  // now the old checkpoint
    return;
  }
  // A filesystem without RENAME_EXCHANGE: a crash between these two renames
  // leaves the previous step as the newest checkpoint, never a half one.
  layout::remove_checkpoint_dir(final_dir);
  fs::rename(tmp, final_dir);
}

}  // namespace

int64_t verify_checkpoint(const std::string& checkpoint_dir) {
  const fs::path dir(checkpoint_dir);
  if (!fs::is_directory(dir))
    throw InputError(c10::str(checkpoint_dir, ": expected a checkpoint directory, found ",
                              fs::exists(dir) ? "a file" : "nothing"));
  const auto manifest = layout::read_manifest(dir);  // its fields are checked there
  std::set<std::string> files{layout::kModel, layout::kOptimizer, layout::kTrainer, layout::kConfig};
  for (const auto& p : manifest["parts"]) files.insert(p.get<std::string>() + ".pt");
  for (const auto& [file, record] : manifest["files"].items()) files.insert(file);
  for (const auto& file : files) read_verified(dir, file, manifest);
  return manifest["step"].get<int64_t>();
}

Checkpointer::Checkpointer(std::string run_dir, torch::nn::Module& model,
                           torch::optim::Optimizer& optimizer, CheckpointOptions options)
    : run_dir_(std::move(run_dir)), model_(model), optimizer_(optimizer), options_(std::move(options)),
      run_dir_made_(fs::is_directory(run_dir_)) {
  TORCH_CHECK(options_.keep_last() >= 0, "Checkpointer: expected keep_last >= 0, got ",
              options_.keep_last());
  // Before any step trains, not at the first save (with the OS's words, exit 74).
  require_checkpoints_dir(run_dir_);
}

void require_checkpoints_dir(const std::string& run_dir) {
  const fs::path root = fs::path(run_dir) / layout::kCheckpoints;
  std::error_code ec;
  const auto status = fs::symlink_status(root, ec);
  if (!ec && fs::exists(status) && !fs::is_directory(fs::status(root, ec)))
    throw InputError(c10::str(root.string(), ": expected the run's checkpoint directory, found ",
                              fs::is_symlink(status) ? "a link to no directory" : "a file",
                              "; move it away, or give the run another directory"));
}

void Checkpointer::add_part(StatePart part) {
  const bool valid = !part.name.empty() && std::all_of(part.name.begin(), part.name.end(), [](char c) {
    return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_';
  });
  TORCH_CHECK(valid, "Checkpointer::add_part: expected a name of a-z, 0-9 and _, got '", part.name, "'");
  for (const char* reserved : {"model", "optimizer", "trainer", "config", "manifest"})
    TORCH_CHECK(part.name != reserved, "Checkpointer::add_part: '", part.name,
                "' names a file every checkpoint has; choose another name");
  for (const auto& p : parts_)
    TORCH_CHECK(p.name != part.name, "Checkpointer::add_part: expected unique names, got '",
                part.name, "' twice");
  TORCH_CHECK(part.save && part.load, "Checkpointer::add_part: '", part.name,
              "': expected both save and load functions");
  parts_.push_back(std::move(part));
}

void Checkpointer::add_file(std::string name, std::string text) {
  for (const char* reserved : {layout::kModel, layout::kOptimizer, layout::kTrainer,
                               layout::kConfig, layout::kManifest})
    TORCH_CHECK(name != reserved, "Checkpointer::add_file: '", name, "' is reserved");
  for (const auto& [n, _] : files_)
    TORCH_CHECK(n != name, "Checkpointer::add_file: expected unique names, got '", name, "' twice");
  TORCH_CHECK(!name.empty() && name.find('/') == std::string::npos && name[0] != '.',
              "Checkpointer::add_file: expected a plain file name, got '", name, "'");
  files_.emplace_back(std::move(name), std::move(text));
}

void Checkpointer::add_model_metadata(std::string key, std::string value) {
  TORCH_CHECK(key != "format", "Checkpointer::add_model_metadata: 'format' is kiln's own");
  model_metadata_[std::move(key)] = std::move(value);
}

std::optional<std::string> read_checkpoint_file(const std::string& dir, const std::string& file) {
  const auto manifest = layout::read_manifest(dir);
  if (!manifest.at("files").contains(file)) return std::nullopt;
  return read_verified(dir, file, manifest);
}

std::string Checkpointer::save(const TrainPosition& position, const std::string& config_toml,
                               const Metrics& metrics) {
  const fs::path root = fs::path(run_dir_) / layout::kCheckpoints;
  if (!fs::exists(root)) {
    // Once the run directory was there, only checkpoints/ is made: a run directory
    // deleted under the job stays deleted (create_directory fails with ENOENT), so the
    // trainer can tell it from one that another process put in its place.
    if (run_dir_made_)
      fs::create_directory(root);
    else
      fs::create_directories(root);
    files::sync_directory(run_dir_);
  }
  run_dir_made_ = true;
  layout::remove_leftovers(root);
  const std::string name = layout::step_dir_name(position.step);
  const fs::path tmp = root / (std::string(layout::kTmpPrefix) + name);
  const fs::path final_dir = root / name;
  fs::create_directory(tmp);
  // A save that fails (a full disk) takes its partial directory with it at once,
  // giving back the space it took; one a crash cut short goes at the next save.
  struct RemoveUnlessInstalled {
    const fs::path& dir;
    bool installed = false;
    ~RemoveUnlessInstalled() {
      std::error_code ignored;
      if (!installed) files::remove_tree(dir.string(), ignored);
    }
  } partial{tmp};

  nlohmann::ordered_json manifest = {{"format", layout::kFormat}, {"version", layout::kVersion},
                                     {"step", position.step},     {"epoch", position.epoch},
                                     {"batch", position.batch},   {"metrics", metrics}};
  manifest["parts"] = nlohmann::ordered_json::array();
  manifest["files"] = nlohmann::ordered_json::object();
  // One file at a time, so at most one serialized copy of the state is in memory.
  const auto write = [&](const std::string& file, const std::string& bytes) {
    files::write_synced((tmp / file).string(), bytes);
    manifest["files"][file] = {{"bytes", bytes.size()}, {"crc32", files::crc32(bytes)}};
  };
  auto metadata = model_metadata_;
  metadata["format"] = "pt";
  write(layout::kModel, safetensors::serialize(named_state(model_), metadata));
  write(layout::kOptimizer, archive_bytes([&](OutputArchive& ar) { optimizer_.save(ar); }));
  for (const auto& part : parts_) {
    write(part.name + ".pt", archive_bytes(part.save));
    manifest["parts"].push_back(part.name);
  }
  write(layout::kTrainer, archive_bytes([&](OutputArchive& ar) { write_trainer_state(ar, position); }));
  write(layout::kConfig, config_toml);
  for (const auto& [file, text] : files_) write(file, text);
  // The manifest last: a directory with one holds every file it lists.
  files::write_synced((tmp / layout::kManifest).string(), manifest.dump(2) + "\n");
  files::sync_directory(tmp.string());

  install(tmp, final_dir);
  partial.installed = true;
  files::sync_directory(root.string());
  layout::apply_retention(run_dir_, final_dir.string(), options_);
  return final_dir.string();
}

TrainPosition Checkpointer::load(const std::string& checkpoint_dir) {
  const fs::path dir(checkpoint_dir);
  if (!fs::is_directory(dir))
    throw InputError(c10::str(checkpoint_dir, ": expected a checkpoint directory, found ",
                              fs::exists(dir) ? "a file" : "nothing"));
  const auto path = [&](const std::string& file) { return (dir / file).string(); };
  const auto manifest = layout::read_manifest(dir);  // its fields are checked there

  // The parts this run has must be exactly the parts the checkpoint has.
  std::set<std::string> saved_parts, run_parts;
  for (const auto& p : manifest["parts"]) saved_parts.insert(p.get<std::string>());
  for (const auto& p : parts_) run_parts.insert(p.name);
  for (const auto& p : run_parts)
    if (!saved_parts.count(p))
      throw InputError(c10::str(checkpoint_dir, ": has no '", p, "' state (", p,
                                ".pt), which this run needs"));
  for (const auto& p : saved_parts)
    if (!run_parts.count(p))
      throw InputError(c10::str(checkpoint_dir, ": holds '", p, "' state (", p,
                                ".pt), which this run does not have; it was saved by a run "
                                "configured otherwise"));

  // Check and parse everything; nothing of the run changes in this block.
  const auto model_state = named_state(model_);
  const auto saved = safetensors::deserialize(read_verified(dir, layout::kModel, manifest),
                                              path(layout::kModel));
  check_model_tensors(saved.tensors, model_state, path(layout::kModel));
  read_verified(dir, layout::kConfig, manifest);
  const std::string trainer_bytes = read_verified(dir, layout::kTrainer, manifest);
  InputArchive trainer_ar;
  torch_pickle::load_archive(trainer_ar, trainer_bytes, path(layout::kTrainer));
  const TrainerState trainer = read_trainer_state(trainer_ar, path(layout::kTrainer));
  if (manifest["step"].get<int64_t>() != trainer.position.step)
    throw InputError(c10::str(path(layout::kTrainer), ": step ", trainer.position.step,
                              " differs from the manifest's ", manifest["step"].get<int64_t>()));
  std::vector<std::string> part_bytes;
  for (const auto& part : parts_) part_bytes.push_back(read_verified(dir, part.name + ".pt", manifest));
  const std::string optimizer_bytes = read_verified(dir, layout::kOptimizer, manifest);

  // The optimizer and the parts check their own state as they load it (AdamW
  // changes nothing when it refuses); the model is written only after them.
  InputArchive optimizer_ar;
  torch_pickle::load_archive(optimizer_ar, optimizer_bytes, path(layout::kOptimizer));
  try {
    optimizer_.load(optimizer_ar);
  } catch (const c10::Error& e) {
    throw InputError(c10::str(path(layout::kOptimizer), ": ", e.what_without_backtrace()));
  }
  for (size_t i = 0; i < parts_.size(); ++i) {
    const std::string file = path(parts_[i].name + ".pt");
    InputArchive ar;
    torch_pickle::load_archive(ar, part_bytes[i], file);
    try {
      parts_[i].load(ar);
    } catch (const c10::Error& e) {
      throw InputError(c10::str(file, ": ", e.what_without_backtrace()));
    } catch (const std::exception& e) {
      throw InputError(c10::str(file, ": ", e.what()));
    }
  }

  {
    torch::NoGradGuard no_grad;
    std::map<std::string, at::Tensor> by_name(saved.tensors.begin(), saved.tensors.end());
    for (const auto& [name, t] : model_state) t.copy_(by_name.at(name));
  }
  set_rng_state(cpu_generator(), trainer.rng_cpu);
  for (size_t d = 0; d < trainer.rng_cuda.size(); ++d)
    set_rng_state(cuda_generator(static_cast<int64_t>(d)), trainer.rng_cuda[d]);
  return trainer.position;
}

}  // namespace kiln::train
