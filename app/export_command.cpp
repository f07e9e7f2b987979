// run_export(): finds and verifies the checkpoint, then writes its weights in the
// format asked for under a temporary name beside --out and renames it into place.
#include "export_command.h"

#include <c10/util/StringUtil.h>
#include <cxxopts.hpp>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "data/npy.h"
#include "checkpoint_arg.h"
#include "train/checkpoint.h"
#include "train/checkpoint_layout.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/files.h"
#include "util/safetensors.h"
#include "util/torch_pickle.h"

namespace kiln::app {
namespace fs = std::filesystem;
namespace {

// The data description a checkpoint may hold (train::kDataFile: task, input transform,
// class names), carried into each format under these names (npy: OUT/data.json).
constexpr const char* kDataMetadataKey = "kiln.data";  // safetensors: a __metadata__ key
constexpr const char* kDataRecord = "kiln_data.json";  // torch: a record in the .pt archive

struct Format {
  const char* name;
  bool directory;  // --out is a directory
  const char* help;
};
constexpr Format kFormats[] = {
    {"safetensors", false, "one .safetensors file (safetensors.torch.load_file);\n"
                           "data.json as __metadata__[\"kiln.data\"]"},
    {"npy", true, "a directory of NAME.npy, one per tensor (numpy.load), and data.json;\n"
                  "bfloat16 written as float32, exactly (NumPy has no bfloat16), with a warning"},
    {"torch", false, "one .pt file, a dict of tensors (torch.load, weights_only=True);\n"
                     "data.json as the archive's record kiln_data.json (Python's zipfile reads it)"},
};

std::string format_names() {
  std::string names;
  for (const auto& f : kFormats) names += std::string(names.empty() ? "" : ", ") + f.name;
  return names;
}

// The format --out's extension names, where --format is not given: .safetensors, or
// .pt/.pth (torch); "" for any other (npy writes a directory, which has none).
std::string format_of_extension(const std::string& out) {
  const auto ext = fs::path(out).extension().string();
  if (ext == ".safetensors") return "safetensors";
  if (ext == ".pt" || ext == ".pth") return "torch";
  return "";
}

const Format& format_named(const std::string& name) {
  for (const auto& f : kFormats)
    if (name == f.name) return f;
  throw InputError(c10::str("--format: expected one of ", format_names(), ", found \"", name, "\""));
}

// Whether `dir` is a kiln checkpoint: its manifest.json says so ("format": "kiln
// checkpoint"). Another program's manifest.json (a web app's) makes no checkpoint.
bool is_checkpoint(const fs::path& dir) {
  std::error_code ec;
  const fs::path manifest = dir / train::layout::kManifest;
  if (!fs::is_regular_file(manifest, ec)) return false;
  std::ifstream in(manifest, std::ios::binary);
  const auto m = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return m.is_object() && m.contains("format") && m["format"] == train::layout::kFormat;
}

// The checkpoint directory that `out` would be written into, at any depth; "" where
// there is none. A checkpoint holds what kiln train wrote and its manifest lists: an
// export there would replace or add to it.
std::string checkpoint_around(const fs::path& out) {
  std::error_code ec;
  const fs::path full = fs::weakly_canonical(fs::absolute(out), ec);
  if (ec) return "";
  for (fs::path p = full.parent_path(); !p.empty(); p = p.parent_path()) {
    if (is_checkpoint(p)) return p.string();
    if (p == p.root_path()) break;
  }
  return "";
}

// Whether the file at `path` begins as a file of `format` does: safetensors an 8-byte
// header length and its JSON's '{', torch a zip's first local header ("PK\3\4").
bool looks_like(const fs::path& path, const Format& format) {
  std::ifstream in(path, std::ios::binary);
  char head[9] = {};
  if (!in.read(head, sizeof head)) return false;
  if (std::string(format.name) == "safetensors") return head[8] == '{';
  return std::memcmp(head, "PK\3\4", 4) == 0;
}

// An existing --out is replaced only with --force, and only when it is what an
// earlier export of this format wrote: a file of the format, or a directory of .npy
// files and data.json. Nothing is written into a checkpoint.
void check_out(const std::string& out, const Format& format, bool force) {
  if (const auto checkpoint = checkpoint_around(out); !checkpoint.empty())
    throw InputError(c10::str(out, ": --out: expected a path outside a checkpoint, found one inside ",
                              checkpoint, " (its files are kiln train's)"));
  if (!fs::exists(fs::symlink_status(out))) return;
  if (!force) throw InputError(c10::str(out, ": --out: already exists; give --force to replace it"));
  const auto earlier = [&]() -> std::string {  // what is there, if not an earlier export
    if (!format.directory) {
      if (!fs::is_regular_file(out)) return "a directory or special file";
      return looks_like(out, format) ? "" : c10::str("a file that is not ", format.name);
    }
    if (!fs::is_directory(out)) return "a file";
    for (const auto& e : fs::directory_iterator(out)) {
      const auto name = e.path().filename().string();
      if (!e.is_regular_file() || (e.path().extension() != ".npy" && name != train::kDataFile))
        return "a directory holding " + name;
    }
    return "";
  }();
  if (!earlier.empty())
    throw InputError(c10::str(out, ": --out --force: replaces an earlier ", format.name,
                              " export only (", format.directory ? "a directory of .npy files" : "a file",
                              "), found ", earlier));
}

// The checkpoint's data.json (checked against the manifest), if it has one, checked to be JSON.
std::optional<std::string> read_data_json(const std::string& checkpoint) {
  auto text = train::read_checkpoint_file(checkpoint, train::kDataFile);
  if (!text) return text;
  try {
    [[maybe_unused]] const auto parsed = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(c10::str((fs::path(checkpoint) / train::kDataFile).string(),
                              ": expected JSON text (", e.what(), ")"));
  }
  return text;
}

// --out as a directory of NAME.npy: a name that is not a plain file name is refused.
void write_npy_dir(const fs::path& dir, const safetensors::Contents& model,
                   const std::optional<std::string>& data_json, const std::string& source) {
  files::remove_tree(dir.string());  // a leftover of a crashed export by a process of the same id
  fs::create_directory(dir);
  std::vector<std::string> widened;
  for (const auto& [name, t] : model.tensors) {
    if (name.empty() || name[0] == '.' || name.find('/') != std::string::npos)
      throw InputError(c10::str(source, ": tensor '", name, "': expected a name that can be a file "
                                "name (npy writes NAME.npy); export --format safetensors or torch"));
    const bool bf16 = t.scalar_type() == at::kBFloat16;
    if (bf16) widened.push_back(name);
    data::write_npy((dir / (name + ".npy")).string(), bf16 ? t.to(at::kFloat) : t);
  }
  if (data_json) files::write_synced((dir / train::kDataFile).string(), *data_json);
  files::sync_directory(dir.string());
  if (!widened.empty())
    std::fprintf(stderr, "kiln: warning: bfloat16 written as float32, exactly (NumPy has no "
                 "bfloat16): %s\n", c10::Join(", ", widened).c_str());
}

std::string file_bytes(const Format& format, const safetensors::Contents& model,
                       const std::optional<std::string>& data_json) {
  if (std::string(format.name) == "safetensors") {
    auto metadata = model.metadata;
    if (data_json) metadata[kDataMetadataKey] = *data_json;
    return safetensors::serialize(model.tensors, metadata);
  }
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, t] : model.tensors) dict.insert(name, t);
  torch_pickle::Records records;
  if (data_json) records[kDataRecord] = *data_json;
  return torch_pickle::serialize(dict, records);
}

}  // namespace

int run_export(const ExportCommand& cmd) {
  const Format& format = format_named(cmd.format);
  if (cmd.out.empty()) throw InputError("--out: expected the path to write, found none");
  fs::path out = fs::path(cmd.out).lexically_normal();
  if (out.has_parent_path() && out.filename().empty()) out = out.parent_path();  // "dir/"
  check_out(out.string(), format, cmd.force);
  const auto choice = checkpoint_argument(cmd.checkpoint, cmd.best);
  const std::string& checkpoint = choice.dir;
  const int64_t step = train::verify_checkpoint(checkpoint);
  const std::string model_path = (fs::path(checkpoint) / train::layout::kModel).string();
  const auto model = safetensors::load_file(model_path);
  const auto data_json = read_data_json(checkpoint);

  // Written beside --out under a temporary name, then renamed into place.
  if (out.has_parent_path()) fs::create_directories(out.parent_path());
  if (!format.directory) {
    files::replace_synced(out.string(), file_bytes(format, model, data_json));
  } else {
    const fs::path tmp = out.string() + ".tmp-" + std::to_string(::getpid());
    try {
      write_npy_dir(tmp, model, data_json, model_path);
      if (fs::exists(fs::symlink_status(out))) {  // --force, checked above: the earlier export goes
        const fs::path old = out.string() + ".old-" + std::to_string(::getpid());
        fs::rename(out, old);
        fs::rename(tmp, out);
        files::remove_tree(old.string());
      } else {
        fs::rename(tmp, out);
      }
    } catch (const std::filesystem::filesystem_error& e) {  // named for --out, the temporary too
      std::error_code ignored;
      files::remove_tree(tmp.string(), ignored);
      const IoError io(e);
      throw IoError(c10::str(out.string(), ": cannot write (", io.what(), ")"), io.error());
    } catch (const IoError& e) {
      std::error_code ignored;
      files::remove_tree(tmp.string(), ignored);
      throw IoError(c10::str(out.string(), ": cannot write (", e.what(), ")"), e.error());
    } catch (...) {
      std::error_code ignored;
      files::remove_tree(tmp.string(), ignored);
      throw;
    }
    files::sync_directory(out.has_parent_path() ? out.parent_path().string() : ".");
  }
  std::printf("exported %zu tensors of step %lld (%s%s%s) to %s (%s%s)\n", model.tensors.size(),
              static_cast<long long>(step), checkpoint.c_str(), choice.why.empty() ? "" : ", ",
              choice.why.c_str(), out.c_str(), format.name, data_json ? ", with data.json" : "");
  return 0;
}

int export_main(int argc, char** argv) {
  std::string formats;
  for (const auto& f : kFormats) {
    std::string help = f.help;
    for (size_t at = help.find('\n'); at != std::string::npos; at = help.find('\n', at + 1))
      help.insert(at + 1, std::string(15, ' '));
    formats += c10::str("\n  ", f.name, std::string(13 - std::strlen(f.name), ' '), help);
  }
  cxxopts::Options options("kiln export",
                           "Write a checkpoint's weights (every parameter and buffer by the "
                           "module's name) for NumPy or PyTorch.");
  options.custom_help("CHECKPOINT [--best] [--format FORMAT] --out PATH [--force]");
  options.positional_help("");
  options.add_options()
      ("checkpoint", "a checkpoint directory (RUN/checkpoints/step_N) or a run directory (its newest)",
       cxxopts::value<std::string>())
      ("best", "with a run directory: its best checkpoint by the run's checkpoint.best metric, not its newest")
      ("format", "safetensors, npy or torch (below); without it, the one --out's extension "
                 "names: .safetensors, .pt or .pth", cxxopts::value<std::string>())
      ("out", "the file (safetensors, torch) or directory (npy) to create", cxxopts::value<std::string>())
      ("force", "replace an existing --out that an earlier export of the same format wrote")
      ("h,help", "show this help");
  options.parse_positional({"checkpoint"});
  ExportCommand cmd;
  try {
    const auto args = options.parse(argc, argv);
    if (args.count("help")) {
      std::cout << options.help() << "\nFormats:" << formats
                << "\n\nThe checkpoint is verified first (each file's size and CRC-32). --out is "
                   "written under a\ntemporary name and renamed into place: it is whole or absent.\n";
      return 0;
    }
    if (!args.count("checkpoint"))
      throw InputError("CHECKPOINT: expected a checkpoint or run directory, found none (see kiln export --help)");
    cmd.checkpoint = args["checkpoint"].as<std::string>();
    if (args.count("out")) cmd.out = args["out"].as<std::string>();
    if (args.count("format")) {
      cmd.format = args["format"].as<std::string>();
    } else {
      cmd.format = format_of_extension(cmd.out);
      if (cmd.format.empty())
        throw InputError(c10::str("--format: expected one of ", format_names(), ", found none",
                                  cmd.out.empty() ? std::string()
                                                  : c10::str(", and --out ", cmd.out, " names none by its extension "
                                                             "(.safetensors, .pt or .pth)"),
                                  " (see kiln export --help)"));
    }
    cmd.force = args.count("force") > 0;
    cmd.best = args.count("best") > 0;
  } catch (const cxxopts::exceptions::exception& e) {
    throw InputError(c10::str(e.what(), " (see kiln export --help)"));
  }
  return run_export(cmd);
}

}  // namespace kiln::app
