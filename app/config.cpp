// Config parsing with toml++. Each key is declared once, in for_each_key(), and
// that one table drives parsing, overrides, validation messages, the resolved TOML
// and the help text, so they cannot drift apart. [optim] holds an OptimizerSpec:
// its unset keys stay unset, and their defaults are read from lib/optim.
#include "config.h"

#include <toml++/toml.h>

#include "data/dataset.h"
#include "nn/factory.h"
#include "optim/factory.h"
#include "optim/schedule.h"
#include "train/amp.h"
#include "train/device.h"
#include "train/profiler.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <type_traits>
#include <sstream>

namespace kiln::app {
namespace {

// The sections in order, and every key with its help. Adding a key is one line.
template <typename C, typename V>
void for_each_key(C& c, V&& v) {
  v("run", "name", c.run.name, "run directory name under run.dir");
  v("run", "dir", c.run.dir, "parent folder of run directories");
  v("data", "format", c.data.format,
    "idx, csv, npy, text or auto (idx without data.train, else by its extension)");
  v("data", "root", c.data.root, "idx: folder with the Fashion-MNIST IDX files (.gz or plain)");
  v("data", "train", c.data.train,
    "csv: the training table; npy: its inputs (.npy, or .npz with x and y); text: a UTF-8 file or folder");
  v("data", "train_targets", c.data.train_targets, "npy: the training targets (.npy)");
  v("data", "test", c.data.test, "the test split's file, as data.train; \"\" = hold out test_fraction");
  v("data", "test_targets", c.data.test_targets, "npy: the test targets (.npy)");
  v("data", "test_fraction", c.data.test_fraction,
    "share of the training rows held out (seeded by train.seed) when there is no data.test");
  v("data", "label", c.data.label, "csv: the label (target) column");
  v("data", "features", c.data.features, "csv: the feature columns; [] = all but the label");
  v("data", "categorical", c.data.categorical, "csv: numeric columns to one-hot encode as categories");
  v("data", "task", c.data.task, "auto, classification or regression");
  v("data", "missing", c.data.missing,
    "csv: a missing value (empty, NA, NaN, null, ?): error, drop (the row) or mean (fill in)");
  v("data", "unseen", c.data.unseen, "csv: a category the training rows lack: error or zero");
  v("data", "standardize", c.data.standardize,
    "scale numeric inputs to mean 0 and deviation 1 with training statistics");
  v("data", "delimiter", c.data.delimiter, "csv: the field delimiter; auto = a tab for .tsv/.tab files, else ','");
  v("data", "block_size", c.data.block_size, "text: tokens the model sees to predict the next one");
  v("data", "stride", c.data.stride, "text: tokens between the starts of consecutive examples");
  v("data", "vocabulary", c.data.vocabulary, "text: char (the text's distinct characters) or byte (256 ids)");
  v("data", "windows", c.data.windows,
    "text, training: strided (every data.stride-th window, shuffled) or random (as many windows "
    "per epoch, each at a random start, seeded)");
  v("data", "exclude", c.data.exclude, "text, a folder: skip files whose name matches one of these patterns (*.dat)");
  v("data", "augment_flip", c.data.augment_flip,
    "images: mirror each training image left to right with probability 1/2");
  v("data", "augment_crop", c.data.augment_crop,
    "images: pad each training image by N pixels and crop back at a random offset; 0 = off");
  v("data", "train_limit", c.data.train_limit, "use the first N training examples; 0 = all");
  v("data", "test_limit", c.data.test_limit, "use the first N test examples; 0 = all");
  v("model", "name", c.model.name, "model to build: mlp, deep_mlp, dynamic_mlp, convnet or gpt");
  v("model", "hidden", c.model.hidden, "mlp: hidden layer widths");
  v("model", "dropout", c.model.dropout, "dropout after each hidden activation, in [0, 1)");
  v("model", "depth", c.model.depth,
    "deep_mlp: number of hidden layers; dynamic_mlp: the most hidden layers a forward call runs");
  v("model", "min_depth", c.model.min_depth,
    "dynamic_mlp: the fewest hidden layers a training step draws, and the first depth evaluated at the end");
  v("model", "depth_sampling", c.model.depth_sampling,
    "dynamic_mlp: fixed (every step runs model.depth layers) or uniform (each step draws its depth "
    "from min_depth..depth, seeded by train.seed)");
  v("model", "residual", c.model.residual, "dynamic_mlp: add each hidden layer's input to its output");
  v("model", "width", c.model.width, "deep_mlp, dynamic_mlp: width of every hidden layer");
  v("model", "activation", c.model.activation,
    "every model's hidden activation: relu, gelu (fused into the Linear before it) or sigmoid");
  v("model", "sigmoid_beta", c.model.sigmoid_beta,
    "sigmoid: the steepness beta of 1/(1+exp(-beta*x)), > 0");
  v("model", "sigmoid_grad_clip", c.model.sigmoid_grad_clip,
    "sigmoid: clamp its local derivative to +-this in backward; 0 = no clamp");
  v("model", "checkpoint_every", c.model.checkpoint_every,
    "deep_mlp, dynamic_mlp: layers, gpt: blocks per activation-checkpointed segment; 0 = off");
  v("model", "channels", c.model.channels,
    "convnet: output channels of each 3x3 conv-batchnorm-relu block");
  v("model", "pool_after", c.model.pool_after, "convnet: blocks (1-based) followed by a 2x2 max-pool");
  v("model", "head", c.model.head, "convnet: hidden width of the head before the output layer; 0 = none");
  v("model", "channels_last", c.model.channels_last,
    "convnet: convolutions in channels-last (NHWC) layout, oneDNN's fast path");
  v("model", "blocks", c.model.blocks, "gpt: transformer blocks");
  v("model", "embed", c.model.embed, "gpt: model width (embedding size), a multiple of model.heads");
  v("model", "heads", c.model.heads, "gpt: attention heads per block");
  v("model", "mlp_ratio", c.model.mlp_ratio, "gpt: each block's MLP width as a multiple of model.embed");
  v("model", "norm", c.model.norm, "gpt: layernorm or rmsnorm (pre-norm, and before the head)");
  v("model", "tie_embeddings", c.model.tie_embeddings,
    "gpt: the output head is the token embedding's matrix");
  v("model", "init_from", c.model.init_from,
    "start from these weights (.safetensors, a checkpoint directory, or a run directory: its newest), matched by name; \"\" = random");
  v("optim", "name", c.optim.name, "optimizer: adamw, sgd, lion or muon");
  v("optim", "lr", c.optim.lr, "peak learning rate (muon: of the matrices)");
  v("optim", "weight_decay", c.optim.weight_decay,
    "weight decay: decoupled; sgd: an L2 term in the gradient");
  v("optim", "beta1", c.optim.beta1, "adamw, lion, muon's AdamW group: first-moment decay");
  v("optim", "beta2", c.optim.beta2, "adamw, lion, muon's AdamW group: second-moment decay");
  v("optim", "eps", c.optim.eps, "adamw, muon's AdamW group: denominator epsilon");
  v("optim", "momentum", c.optim.momentum, "sgd, muon: momentum");
  v("optim", "nesterov", c.optim.nesterov, "sgd, muon: Nesterov momentum");
  v("optim", "adamw_lr", c.optim.muon_adamw_lr,
    "muon: learning rate of its AdamW group (non-matrix parameters, the output head)");
  v("optim", "clip_norm", c.optim.clip_norm, "clip gradients to this global norm; 0 = off");
  v("schedule", "name", c.schedule.name, "learning-rate schedule: constant, cosine, linear or wsd");
  v("schedule", "warmup_steps", c.schedule.warmup_steps, "steps of linear warmup from 0");
  v("schedule", "min_lr", c.schedule.min_lr, "cosine, linear, wsd: learning rate at the end");
  v("schedule", "decay_fraction", c.schedule.decay_fraction,
    "wsd: fraction of all steps spent in the final decay");
  v("train", "epochs", c.train.epochs, "passes over the training set");
  v("train", "batch_size", c.train.batch_size, "examples per optimizer step");
  v("train", "accumulate", c.train.accumulate,
    "micro-batches per step (gradient accumulation); divides batch_size");
  v("train", "eval_batch_size", c.train.eval_batch_size, "examples per evaluation batch");
  v("train", "eval_every", c.train.eval_every, "steps between evaluations; 0 = at epoch ends only");
  v("train", "log_every", c.train.log_every, "steps between training lines in metrics.jsonl");
  v("train", "max_steps", c.train.max_steps, "stop after this many steps; 0 = run all epochs");
  v("train", "seed", c.train.seed, "seed of initialisation, dropout and shuffling");
  v("train", "threads", c.train.threads, "CPU threads, at most 1024; 0 = the CPUs this process may use (affinity, container quota)");
  v("train", "device", c.train.device, "cpu, cuda or cuda:N");
  v("train", "precision", c.train.precision,
    "fp32, bf16 (autocast) or fp16 (autocast with dynamic loss scaling; slow on the CPU)");
  v("train", "prefetch", c.train.prefetch,
    "batches a background thread assembles ahead of the step; 0 = assemble each in the step; "
    "-1 = auto (0 on the CPU, 2 on a GPU)");
  v("train", "data_on_device", c.train.data_on_device,
    "keep the data set on the device (true) or in host memory, each batch copied over (false)");
  v("train", "flush_denormals", c.train.flush_denormals,
    "treat float values below 1.2e-38 as 0 in the run's CPU threads (true; each such value slows "
    "a CPU instruction about a hundredfold) or keep them (false)");
  v("checkpoint", "every", c.checkpoint.every, "steps between checkpoints; 0 = at the end only");
  v("checkpoint", "keep_last", c.checkpoint.keep_last, "checkpoints to keep; 0 = all");
  v("checkpoint", "best", c.checkpoint.best,
    "also keep the best checkpoint by test_loss, test_accuracy, test_rmse or test_r2; auto = "
    "test_accuracy or test_rmse by task; \"\" = no");
  v("memory", "report_every", c.memory.report_every,
    "steps between memory reports; 0 = at the end only");
  v("memory", "fraction", c.memory.fraction,
    "cuda: cap the caching allocator at this fraction of the device; 0 = no cap");
  v("memory", "empty_cache_every", c.memory.empty_cache_every,
    "cuda: release cached blocks every N steps; 0 = never");
  v("memory", "history", c.memory.history,
    "cuda: record allocations and write memory_snapshot.pickle (PyTorch's memory viz)");
  v("profile", "steps", c.profile.steps,
    "profile steps A:B (1-based, inclusive) with PyTorch's profiler: RUN/profile/trace.json and "
    "top_ops.txt; \"\" = off");
  v("profile", "memory", c.profile.memory, "profile: record allocations (the memory table)");
  v("profile", "shapes", c.profile.shapes, "profile: record each operator's input shapes");
  v("profile", "stack", c.profile.stack, "profile: record each operator's C++ call stack (large traces)");
  v("profile", "top", c.profile.top, "profile: rows in each table of top_ops.txt");
  v("tensorboard", "histogram_every", c.tensorboard.histogram_every,
    "steps between histograms of every weight and gradient in RUN/tb/; 0 = none");
  v("dist", "batch", c.dist.batch,
    "data-parallel (torchrun): per_rank (train.batch_size per process; the step's batch is that times "
    "the processes) or global (train.batch_size split across the processes)");
  v("dist", "bucket_mb", c.dist.bucket_mb, "data-parallel: MiB of gradients all-reduced together (DDP's bucket_cap_mb)");
  v("dist", "timeout_s", c.dist.timeout_s,
    "data-parallel: seconds a process waits for the others (the store, a collective) before it fails");
}

const std::vector<std::string>& sections() {
  static const std::vector<std::string> s = {"run",   "data",       "model", "optim",
                                             "schedule", "train", "checkpoint", "memory",
                                             "profile", "tensorboard", "dist"};
  return s;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

std::vector<std::string> quoted(std::vector<std::string> items) {
  for (auto& i : items) i = '"' + i + '"';
  return items;
}

std::vector<std::string> keys_of(const std::string& section) {
  std::vector<std::string> keys;
  Config c;
  for_each_key(c, [&](const char* s, const char* k, auto&, const char*) {
    if (section == s) keys.emplace_back(k);
  });
  return keys;
}

const char* expected_name(const bool*) { return "true or false"; }
const char* expected_name(const int64_t*) { return "an integer"; }
const char* expected_name(const double*) { return "a number"; }
const char* expected_name(const std::string*) { return "a string"; }
const char* expected_name(const std::vector<int64_t>*) { return "an array of integers"; }
const char* expected_name(const std::vector<std::string>*) { return "an array of strings"; }
template <typename T>
const char* expected_name(const std::optional<T>*) {
  return expected_name(static_cast<const T*>(nullptr));
}

// What a node holds, as a user would write it: `string "ten"`, `integer 3`.
std::string describe(const toml::node& node) {
  std::ostringstream s;
  s << node.type() << ' ';
  if (node.is_table()) s << "{…}";
  else if (node.is_string()) s << '"' << *node.value<std::string>() << '"';
  else node.visit([&](auto&& n) { s << n; });
  return s.str();
}

// Stores `node` into `field` or says why it cannot.
bool assign(bool& field, const toml::node& node) {
  if (!node.is_boolean()) return false;
  field = *node.value<bool>();
  return true;
}
bool assign(int64_t& field, const toml::node& node) {
  if (!node.is_integer()) return false;
  field = *node.value<int64_t>();
  return true;
}
bool assign(double& field, const toml::node& node) {
  if (!node.is_number()) return false;  // an integer is fine where a float is expected
  field = *node.value<double>();
  return true;
}
bool assign(std::string& field, const toml::node& node) {
  if (!node.is_string()) return false;
  field = *node.value<std::string>();
  return true;
}
bool assign(std::vector<int64_t>& field, const toml::node& node) {
  const auto* arr = node.as_array();
  if (!arr || (!arr->empty() && !arr->is_homogeneous(toml::node_type::integer))) return false;
  std::vector<int64_t> out;
  for (const auto& e : *arr) out.push_back(*e.value<int64_t>());
  field = std::move(out);
  return true;
}
bool assign(std::vector<std::string>& field, const toml::node& node) {
  const auto* arr = node.as_array();
  if (!arr || (!arr->empty() && !arr->is_homogeneous(toml::node_type::string))) return false;
  std::vector<std::string> out;
  for (const auto& e : *arr) out.push_back(*e.value<std::string>());
  field = std::move(out);
  return true;
}
template <typename T>
bool assign(std::optional<T>& field, const toml::node& node) {
  T value{};
  if (!assign(value, node)) return false;
  field = std::move(value);
  return true;
}

std::string where(const toml::node& node, const std::string& name) {
  const auto& src = node.source();
  if (!src.begin) return name;
  return name + ":" + std::to_string(src.begin.line) + ":" + std::to_string(src.begin.column);
}

// Sets [section] key from node; `place` names the origin for messages.
void set_key(Config& c, const std::string& section, const std::string& key, const toml::node& node,
             const std::string& place) {
  bool found = false;
  for_each_key(c, [&](const char* s, const char* k, auto& field, const char*) {
    if (found || section != s || key != k) return;
    found = true;
    if (!assign(field, node))
      throw ConfigError(place + ": [" + section + "] " + key + ": expected " +
                        expected_name(&field) + ", found " + describe(node));
    c.origin[section + "." + key] = place;
  });
  if (!found)
    throw ConfigError(place + ": unknown key '" + key + "' in [" + section +
                      "]; valid keys: " + join(keys_of(section)));
}

// Whether [section] key holds a list (model.hidden, data.exclude, …).
bool holds_array(Config& c, const std::string& section, const std::string& key) {
  bool array = false;
  for_each_key(c, [&](const char* s, const char* k, auto& field, const char*) {
    using T = std::decay_t<decltype(field)>;
    if (section == s && key == k)
      array = std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<std::string>>;
  });
  return array;
}

void check_section(const std::string& section, const std::string& place) {
  if (std::find(sections().begin(), sections().end(), section) == sections().end())
    throw ConfigError(place + ": unknown section [" + section + "]; valid sections: " +
                      join(sections()));
}

template <typename T>
std::string value_text(const T& v) {
  std::ostringstream s;
  if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                std::is_same_v<T, std::vector<std::string>>) {
    toml::array a;
    for (auto x : v) a.push_back(x);
    s << a;
  } else if constexpr (std::is_same_v<T, double>) {
    // Shortest text that reads back as the same double, in TOML float syntax.
    char buf[64];
    const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
    std::string t(buf, end);
    if (t.find_first_of(".eEn") == std::string::npos) t += ".0";
    s << t;
  } else {
    s << toml::value<T>(v);
  }
  return s.str();
}

// A key's value as TOML text; nullopt for an optional key left unset.
template <typename T>
std::optional<std::string> text_of(const T& v) {
  return value_text(v);
}
template <typename T>
std::optional<std::string> text_of(const std::optional<T>& v) {
  if (!v) return std::nullopt;
  return value_text(*v);
}

// "section.key" → value text, for every key of `c` that holds a value.
std::map<std::string, std::string> values_of(const Config& c) {
  std::map<std::string, std::string> out;
  for_each_key(c, [&](const char* s, const char* k, const auto& field, const char*) {
    if (const auto t = text_of(field)) out[std::string(s) + "." + k] = *t;
  });
  return out;
}

bool known_optimizer(const std::string& name) {
  const auto& names = optim::optimizer_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

// `c` with each [optim] key its optimizer reads and `c` leaves unset at that
// optimizer's own default (lib/optim's resolve_defaults; c.optim.name must be known).
Config with_optimizer_defaults(Config c) {
  static_cast<optim::OptimizerSpec&>(c.optim) = optim::resolve_defaults(c.optim);
  return c;
}

// What an unset key means for each optimizer, for the help text:
// "adamw 0.999, lion 0.99, muon 0.999" (empty when no optimizer reads the key).
std::string optimizer_defaults(const std::string& key) {
  std::string out;
  for (const auto& name : optim::optimizer_names()) {
    Config c;
    c.optim.name = name;
    const auto values = values_of(with_optimizer_defaults(c));
    if (const auto it = values.find(key); it != values.end())
      out += (out.empty() ? "" : ", ") + name + " " + it->second;
  }
  return out;
}

// What a syntax error found: the text from (line, column), 1-based, to the end of that
// line, quoted and cut at 40 bytes, or "the end of the line".
std::string text_at(std::string_view text, size_t line, size_t column) {
  size_t start = 0;
  for (size_t l = 1; l < line && start != std::string_view::npos; ++l) {
    start = text.find('\n', start);
    if (start != std::string_view::npos) ++start;
  }
  if (start == std::string_view::npos || start >= text.size()) return "the end of the file";
  auto rest = text.substr(start, text.find('\n', start) - start);
  if (!rest.empty() && rest.back() == '\r') rest.remove_suffix(1);
  // toml++ counts columns in characters: skip column - 1 of them, each a lead byte and
  // its UTF-8 continuation bytes (10xxxxxx); the cut at 40 bytes ends on a character too.
  const auto continuation = [&](size_t i) { return (static_cast<unsigned char>(rest[i]) & 0xC0) == 0x80; };
  size_t i = 0;
  for (size_t skipped = 0; i < rest.size() && skipped + 1 < column; ++skipped)
    for (++i; i < rest.size() && continuation(i); ++i) {
    }
  rest.remove_prefix(i);
  if (rest.empty()) return "the end of the line";
  size_t cut = std::min<size_t>(rest.size(), 40);
  while (cut < rest.size() && cut > 0 && continuation(cut)) --cut;
  return "\"" + std::string(rest.substr(0, cut)) + (cut < rest.size() ? "…" : "") + "\"";
}

}  // namespace

std::string default_data_root() { return data::kDefaultFashionMnistRoot; }

Config parse_config(const std::string& text, const std::string& name) {
  toml::table root;
  try {
    root = toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    std::ostringstream s;
    s << name << ":" << e.source().begin.line << ":" << e.source().begin.column
      << ": TOML syntax error: " << e.description() << " (found "
      << text_at(text, e.source().begin.line, e.source().begin.column) << ")";
    // Escaped here, not only where it is printed: a NUL byte of the file would end the
    // message's C string (what()) in the middle of the quote.
    throw ConfigError(printable(s.str()));
  }
  Config c;
  for (const auto& [section, node] : root) {
    const std::string sec(section.str());
    check_section(sec, where(node, name));
    const auto* table = node.as_table();
    if (!table)
      throw ConfigError(where(node, name) + ": [" + sec + "]: expected a table, found " +
                        describe(node));
    for (const auto& [key, value] : *table)
      set_key(c, sec, std::string(key.str()), value, where(value, name));
  }
  return c;
}

Config load_config(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw ConfigError(path + ": expected a config file (TOML), found " +
                      (std::filesystem::is_directory(path, ec) ? "a directory" : "no regular file"));
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot read the config file (no such file?)");
  std::stringstream text;
  text << in.rdbuf();
  Config c = parse_config(text.str(), path);
  // A config that names no run names it after itself: configs/wide.toml runs in
  // runs/wide, not in the default's runs/fashion_mlp beside every other such config.
  const auto root = toml::parse(text.str(), path);  // parse_config has checked the syntax
  const auto* run = root["run"].as_table();
  if (run == nullptr || !run->contains("name")) c.run.name = std::filesystem::path(path).stem().string();
  return c;
}

namespace {

// A number as a shell user writes one and TOML does not take: ".002", "5.", "-.5",
// "1.e-3" (TOML wants a digit on each side of the point). Nothing else: "inf", "0x10"
// and "1_000" are TOML's own or text.
std::optional<double> shell_float(const std::string& v) {
  if (v.empty() || v.find('.') == std::string::npos ||
      v.find_first_not_of("0123456789.eE+-") != std::string::npos ||
      (v[0] == '+' && v.size() > 1 && (v[1] == '+' || v[1] == '-')))
    return std::nullopt;
  double out = 0;
  const char* end = v.data() + v.size();
  const char* begin = v.data() + (v[0] == '+' ? 1 : 0);  // from_chars takes no '+'
  const auto r = std::from_chars(begin, end, out);
  if (r.ec != std::errc() || r.ptr != end) return std::nullopt;
  return out;
}

}  // namespace

void apply_override(Config& c, const std::string& assignment) {
  const std::string place = "--set " + assignment;
  const auto eq = assignment.find('=');
  const auto dot = assignment.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq)
    throw ConfigError(place + ": expected section.key=value, found no " +
                      (eq == std::string::npos ? "'='" : "'.' before '='"));
  const std::string section = assignment.substr(0, dot);
  const std::string key = assignment.substr(dot + 1, eq - dot - 1);
  const std::string value = assignment.substr(eq + 1);
  check_section(section, place);
  toml::table parsed;
  std::string not_toml;  // why the value is no TOML value, when it was read as a word
  // A bare word is a string, if that is what the key holds. TOML text is UTF-8, so a
  // word that is not (or holds control characters) could not be written to the run's
  // config.toml and read back on resume (the fuzzer found this).
  const auto word = [&](const std::string& w) {
    if (printable(w) != w)
      throw ConfigError(place + ": expected a value of UTF-8 text without control characters, found '" +
                        printable(w) + "'");
    return w;
  };
  if (holds_array(c, section, key) && !value.empty() && value.front() != '[') {
    // A list's items without the brackets a shell would need quoted: model.hidden=256,128
    // and data.exclude=*.dat,*.u8 (words, each a string) as [256, 128] and ["*.dat", "*.u8"].
    try {
      parsed = toml::parse("v = [" + value + "]");
    } catch (const toml::parse_error&) {
      toml::array items;
      for (size_t from = 0;;) {
        const auto comma = value.find(',', from);
        items.push_back(word(value.substr(from, comma == std::string::npos ? std::string::npos : comma - from)));
        if (comma == std::string::npos) break;
        from = comma + 1;
      }
      parsed.insert("v", std::move(items));
    }
  } else {
    try {
      parsed = toml::parse("v = " + value);
    } catch (const toml::parse_error& e) {
      if (const auto number = shell_float(value)) {
        parsed.insert("v", *number);
      } else {
        parsed.insert("v", word(value));
        // Why TOML did not read it, for what was meant as a number, list or quoted string
        // ("1.2.3", 2^64, "[1, 2"); a plain word ("ten") is text, and TOML's reason noise.
        if (std::string_view("0123456789+-.[\"'{").find(value[0]) != std::string_view::npos)
          not_toml = std::string(e.description());
      }
    }
  }
  try {
    set_key(c, section, key, *parsed.get("v"), place);
  } catch (const ConfigError& e) {
    // A key that takes no text: say why the value was not read as a number or a list
    // ("integer overflow" for a seed of 2^64).
    if (not_toml.empty()) throw;
    throw ConfigError(std::string(e.what()) + " (not a TOML value: " + not_toml + ")");
  }
  c.origin[section + "." + key] = "--set";
}

void validate(const Config& c) {
  const auto fail = [&](const std::string& key, const std::string& what, const std::string& found) {
    const auto it = c.origin.find(key);
    const std::string from = it == c.origin.end() ? "default" : it->second;
    throw ConfigError(from + ": " + key + ": expected " + what + ", found " + found);
  };
  const auto positive = [&](const std::string& key, int64_t v) {
    if (v <= 0) fail(key, "an integer > 0", std::to_string(v));
  };
  const auto non_negative = [&](const std::string& key, int64_t v) {
    if (v < 0) fail(key, "an integer >= 0", std::to_string(v));
  };
  const auto one_of = [&](const std::string& key, const std::string& v,
                          const std::vector<std::string>& valid) {
    if (std::find(valid.begin(), valid.end(), v) == valid.end())
      fail(key, "one of: " + join(quoted(valid)), "\"" + v + "\"");
  };
  const auto in_range = [&](const std::string& key, double v, double lo, bool lo_open, double hi,
                            bool hi_open, const std::string& what) {
    const bool ok = (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
    if (!ok) fail(key, what, value_text(v));  // NaN fails every comparison
  };
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // "." and ".." name no directory of run.dir's own: the run would land in run.dir
  // itself or above it, over whatever files are there.
  if (c.run.name.empty() || c.run.name.find('/') != std::string::npos || c.run.name == "." ||
      c.run.name == "..")
    fail("run.name", "a non-empty name without '/', other than \".\" and \"..\"", "\"" + c.run.name + "\"");
  one_of("data.format", c.data.format, [] {
    auto f = data::data_formats();
    f.insert(f.begin(), "auto");
    return f;
  }());
  in_range("data.test_fraction", c.data.test_fraction, 0, true, 1, true, "a fraction in (0, 1)");
  one_of("data.task", c.data.task, {"auto", "classification", "regression"});
  one_of("data.missing", c.data.missing, {"error", "drop", "mean"});
  one_of("data.unseen", c.data.unseen, {"error", "zero"});
  if (c.data.delimiter != "auto" &&
      (c.data.delimiter.size() != 1 || c.data.delimiter == "\"" || c.data.delimiter == "\n"))
    fail("data.delimiter", "auto or one character other than a quote or a line end",
         "\"" + c.data.delimiter + "\"");
  positive("data.block_size", c.data.block_size);
  non_negative("data.augment_crop", c.data.augment_crop);
  positive("data.stride", c.data.stride);
  one_of("data.vocabulary", c.data.vocabulary, {"char", "byte"});
  non_negative("data.train_limit", c.data.train_limit);
  non_negative("data.test_limit", c.data.test_limit);
  one_of("model.name", c.model.name, kiln::nn::model_names());
  for (size_t i = 0; i < c.model.hidden.size(); ++i) positive("model.hidden", c.model.hidden[i]);
  in_range("model.dropout", c.model.dropout, 0, false, 1, true, "a probability in [0, 1)");
  positive("model.depth", c.model.depth);
  if (c.model.channels.empty()) fail("model.channels", "at least one block width", "[]");
  for (const int64_t ch : c.model.channels) positive("model.channels", ch);
  for (const int64_t p : c.model.pool_after)
    if (p < 1 || p > static_cast<int64_t>(c.model.channels.size()))
      fail("model.pool_after", "block numbers in 1.." + std::to_string(c.model.channels.size()),
           std::to_string(p));
  non_negative("model.head", c.model.head);
  positive("model.width", c.model.width);
  non_negative("model.min_depth", c.model.min_depth);
  if (c.model.min_depth > c.model.depth)
    fail("model.min_depth", "an integer <= model.depth (" + std::to_string(c.model.depth) + ")",
         std::to_string(c.model.min_depth));
  one_of("model.depth_sampling", c.model.depth_sampling, kiln::nn::depth_samplings());
  non_negative("model.checkpoint_every", c.model.checkpoint_every);
  one_of("data.windows", c.data.windows, {"strided", "random"});
  positive("model.blocks", c.model.blocks);
  positive("model.heads", c.model.heads);
  positive("model.embed", c.model.embed);
  if (c.model.embed % c.model.heads != 0)
    fail("model.embed", "a multiple of model.heads (" + std::to_string(c.model.heads) + ")",
         std::to_string(c.model.embed));
  positive("model.mlp_ratio", c.model.mlp_ratio);
  one_of("model.norm", c.model.norm, kiln::nn::gpt_norms());
  one_of("model.activation", c.model.activation, kiln::nn::activation_names());
  in_range("model.sigmoid_beta", c.model.sigmoid_beta, 0, true, kInf, true, "a finite number > 0");
  in_range("model.sigmoid_grad_clip", c.model.sigmoid_grad_clip, 0, false, kInf, true,
           "a finite number >= 0 (0 = no clamp)");
  one_of("optim.name", c.optim.name, kiln::optim::optimizer_names());
  const auto& o = c.optim;  // unset keys are the optimizer's defaults, valid by construction
  if (o.lr) in_range("optim.lr", *o.lr, 0, true, kInf, true, "a number > 0");
  if (o.weight_decay)
    in_range("optim.weight_decay", *o.weight_decay, 0, false, kInf, true, "a number >= 0");
  if (o.beta1) in_range("optim.beta1", *o.beta1, 0, false, 1, true, "a number in [0, 1)");
  if (o.beta2) in_range("optim.beta2", *o.beta2, 0, false, 1, true, "a number in [0, 1)");
  if (o.eps) in_range("optim.eps", *o.eps, 0, false, kInf, true, "a number >= 0");
  if (o.momentum) in_range("optim.momentum", *o.momentum, 0, false, 1, true, "a number in [0, 1)");
  if (o.muon_adamw_lr)
    in_range("optim.adamw_lr", *o.muon_adamw_lr, 0, false, kInf, true, "a number >= 0");
  in_range("optim.clip_norm", o.clip_norm, 0, false, kInf, true, "a number >= 0");
  try {  // what only the optimizer knows (SGD's nesterov needs momentum > 0): ask it
    optim::make_optimizer(o, torch::OrderedDict<std::string, torch::Tensor>());
  } catch (const InputError& e) {
    throw ConfigError(e.what());
  }
  one_of("schedule.name", c.schedule.name, kiln::optim::schedule_kinds());
  non_negative("schedule.warmup_steps", c.schedule.warmup_steps);
  const double lr = *optim::resolve_defaults(o).lr;
  in_range("schedule.min_lr", c.schedule.min_lr, 0, false, lr, false,
           "a number in [0, optim.lr] (" + value_text(lr) + ")");
  in_range("schedule.decay_fraction", c.schedule.decay_fraction, 0, false, 1, false,
           "a number in [0, 1]");
  positive("train.epochs", c.train.epochs);
  positive("train.batch_size", c.train.batch_size);
  positive("train.accumulate", c.train.accumulate);
  if (c.train.batch_size % c.train.accumulate != 0)
    fail("train.accumulate", "a divisor of train.batch_size (" +
             std::to_string(c.train.batch_size) + ")", std::to_string(c.train.accumulate));
  positive("train.eval_batch_size", c.train.eval_batch_size);
  non_negative("train.eval_every", c.train.eval_every);
  positive("train.log_every", c.train.log_every);
  non_negative("train.max_steps", c.train.max_steps);
  non_negative("train.seed", c.train.seed);
  if (c.train.threads < 0 || c.train.threads > train::kMaxThreads)
    fail("train.threads", "an integer in 0.." + std::to_string(train::kMaxThreads) + " (0 = the CPUs this process may use)",
         std::to_string(c.train.threads));
  if (c.train.prefetch < -1) fail("train.prefetch", "-1 (auto) or a depth >= 0", std::to_string(c.train.prefetch));
  if (c.train.device != "cpu" && c.train.device != "cuda" && c.train.device.rfind("cuda:", 0) != 0)
    fail("train.device", "cpu, cuda or cuda:N", "\"" + c.train.device + "\"");
  one_of("train.precision", c.train.precision,
         {std::begin(train::kPrecisionNames), std::end(train::kPrecisionNames)});
  non_negative("checkpoint.every", c.checkpoint.every);
  non_negative("checkpoint.keep_last", c.checkpoint.keep_last);
  one_of("checkpoint.best", c.checkpoint.best,
         {"auto", "", "test_loss", "test_accuracy", "test_rmse", "test_r2"});
  non_negative("memory.report_every", c.memory.report_every);
  in_range("memory.fraction", c.memory.fraction, 0, false, 1, false, "a number in [0, 1]");
  non_negative("memory.empty_cache_every", c.memory.empty_cache_every);
  try {
    train::parse_profile_steps(c.profile.steps, "profile.steps");
  } catch (const InputError&) {
    fail("profile.steps", "\"A:B\" (steps A to B, 1 <= A <= B) or \"\" (off)", "\"" + c.profile.steps + "\"");
  }
  positive("profile.top", c.profile.top);
  non_negative("tensorboard.histogram_every", c.tensorboard.histogram_every);
  one_of("dist.batch", c.dist.batch, {"per_rank", "global"});
  in_range("dist.bucket_mb", c.dist.bucket_mb, 0, true, 1 << 20, false, "a number of MiB > 0");
  positive("dist.timeout_s", c.dist.timeout_s);
}

std::string to_toml(const Config& c) {
  // The value each unset key stands for with this optimizer (none where it does not read the key).
  const auto applies =
      known_optimizer(c.optim.name) ? values_of(with_optimizer_defaults(c)) : values_of(c);
  std::ostringstream out;
  std::string current;
  for_each_key(c, [&](const char* s, const char* k, const auto& field, const char* help) {
    if (current != s) {
      out << (current.empty() ? "" : "\n") << '[' << s << "]\n";
      current = s;
    }
    if (const auto text = text_of(field)) {
      out << k << " = " << *text << "  # " << help << '\n';
    } else if (const auto it = applies.find(std::string(s) + "." + k); it != applies.end()) {
      out << "# " << k << " = " << it->second << "  # " << help << " (unset: " << c.optim.name
          << "'s default)\n";
    } else {
      out << "# " << k << " unset  # " << help << '\n';
    }
  });
  return out.str();
}

std::vector<std::string> changed_settings(const Config& before, const Config& after) {
  // An unset optimizer key stands for the optimizer's default: compared as that value.
  const auto effective = [](const Config& c) {
    return known_optimizer(c.optim.name) ? values_of(with_optimizer_defaults(c)) : values_of(c);
  };
  const auto a = effective(before), b = effective(after);
  std::vector<std::string> out;
  for_each_key(after, [&](const char* s, const char* k, const auto&, const char*) {
    const std::string name = std::string(s) + "." + k;
    const auto x = a.find(name), y = b.find(name);
    const std::string from = x == a.end() ? "unset" : x->second, to = y == b.end() ? "unset" : y->second;
    if (from != to) out.push_back(name + " " + from + " → " + to);
  });
  return out;
}

std::string describe_keys() {
  std::ostringstream out;
  Config c;
  for_each_key(c, [&](const char* s, const char* k, const auto& field, const char* help) {
    std::string name = std::string(s) + "." + k;
    // run.name's default is load_config's: the config file's own name.
    const auto text = name == "run.name" ? std::nullopt : text_of(field);
    const auto defaults = name == "run.name" ? "the config file's name without .toml"
                          : text             ? *text
                                             : optimizer_defaults(name);
    name.resize(std::max<size_t>(name.size(), 24), ' ');
    out << "  " << name << ' ' << help << " (default" << (text ? " " : ": ")
        << (defaults.empty() ? "none" : defaults) << ")\n";
  });
  return out.str();
}

}  // namespace kiln::app
