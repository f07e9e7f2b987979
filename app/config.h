// kiln's experiment config: typed structs, parsed once from TOML and --set
// overrides, validated, and written back as the resolved TOML of a run.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "optim/spec.h"
#include "util/error.h"

namespace kiln::app {

/// data.root's default, kiln::data::kDefaultFashionMnistRoot (defined in config.cpp,
/// so this header stays free of torch).
std::string default_data_root();

struct Config {
  struct Run {
    std::string name = "fashion_mlp";
    std::string dir = "runs";
  } run;
  struct Data {
    std::string format = "auto";
    std::string root = default_data_root();
    std::string train, train_targets, test, test_targets;
    double test_fraction = 0.2;
    std::string label;
    std::vector<std::string> features, categorical;
    std::string task = "auto";
    std::string missing = "error";
    std::string unseen = "error";
    bool standardize = true;
    std::string delimiter = "auto";
    int64_t block_size = 32;
    int64_t stride = 1;
    std::string vocabulary = "char";
    std::string windows = "strided";
    std::vector<std::string> exclude;
    bool augment_flip = false;
    int64_t augment_crop = 0;
    int64_t train_limit = 0;
    int64_t test_limit = 0;
  } data;
  struct Model {
    std::string name = "mlp";
    std::vector<int64_t> hidden = {512, 256};
    double dropout = 0.0;
    int64_t depth = 50;
    int64_t min_depth = 1;
    int64_t width = 1024;
    std::string depth_sampling = "fixed";
    bool residual = true;
    int64_t checkpoint_every = 0;
    std::string activation = "relu";
    double sigmoid_beta = 1.0;
    double sigmoid_grad_clip = 0.0;
    std::string init_from;
    std::vector<int64_t> channels = {32, 32, 64, 64};
    std::vector<int64_t> pool_after = {2, 4};
    int64_t head = 256;
    bool channels_last = false;
    int64_t blocks = 4;
    int64_t embed = 192;
    int64_t heads = 6;
    int64_t mlp_ratio = 4;
    std::string norm = "layernorm";
    bool tie_embeddings = true;
  } model;
  /// The optimizer's spec as it is (an unset key is the optimizer's own default,
  /// never one written here), plus the gradient clipping the trainer applies.
  struct Optim : optim::OptimizerSpec {
    double clip_norm = 0.0;
  } optim;
  struct Schedule {
    std::string name = "constant";
    int64_t warmup_steps = 0;
    double min_lr = 0.0;
    double decay_fraction = 0.2;
  } schedule;
  struct Train {
    int64_t epochs = 10;
    int64_t batch_size = 128;
    int64_t accumulate = 1;
    int64_t eval_batch_size = 1000;
    int64_t eval_every = 0;
    int64_t log_every = 50;
    int64_t max_steps = 0;
    int64_t seed = 0;
    int64_t threads = 0;
    std::string device = "cpu";
    std::string precision = "fp32";
    int64_t prefetch = -1;
    bool data_on_device = true;
    bool flush_denormals = true;
  } train;
  struct Checkpoint {
    int64_t every = 0;
    int64_t keep_last = 3;
    std::string best = "auto";
  } checkpoint;
  struct Memory {
    int64_t report_every = 0;
    double fraction = 0.0;
    int64_t empty_cache_every = 0;
    bool history = false;
  } memory;
  struct Profile {
    std::string steps;
    bool memory = true;
    bool shapes = true;
    bool stack = false;
    int64_t top = 20;
  } profile;
  struct TensorBoard {
    int64_t histogram_every = 0;
  } tensorboard;
  struct Dist {
    std::string batch = "per_rank";
    double bucket_mb = 25.0;
    int64_t timeout_s = 60;
  } dist;

  /// Where each key's value came from ("FILE:LINE" or "--set"), for error messages.
  std::map<std::string, std::string> origin;
};

/// A bad config file, key, value or override; the app exits with code 2.
class ConfigError : public InputError {
 public:
  using InputError::InputError;
};

/// Parses `path` over the defaults. Example: auto c = load_config("configs/fashion_mlp.toml");
Config load_config(const std::string& path);
/// Parses TOML text over the defaults; `name` stands for the file in messages.
Config parse_config(const std::string& text, const std::string& name);
/// Applies "section.key=value" (the value in TOML syntax; a bare word is taken as a
/// string where the key is one). Example: apply_override(c, "train.epochs=3");
void apply_override(Config& config, const std::string& assignment);
/// Checks ranges and names (optimizer, model, device) once all overrides are in.
void validate(const Config& config);
/// The resolved config as TOML, with each key's help as a comment. A key left unset
/// (the optimizer's own default) is written as a comment with the value that applies,
/// so the text reads back to the same config.
/// Example: for lion, "# beta2 = 0.99  # … (unset: lion's default)"
std::string to_toml(const Config& config);

/// The keys whose values differ between two configs, as "optim.lr 0.001 → 0.01" (an
/// unset optimizer key as the optimizer's default; another unset key reads "unset"), in
/// the config's order. Example: a resume's changes.
std::vector<std::string> changed_settings(const Config& before, const Config& after);
/// Every key with its default and help, for `kiln train --help`; an optimizer key's
/// default is each optimizer's own, read from lib/optim ("default: adamw 0.999, lion 0.99, …").
std::string describe_keys();

}  // namespace kiln::app
