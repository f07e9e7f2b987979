// run_sample(): rebuilds the checkpoint's model from the config and data schema it
// carries, loads its weights, encodes the prompt and generates.
#include "sample_command.h"

#include <ATen/Parallel.h>
#include <c10/util/StringUtil.h>
#include <cxxopts.hpp>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <vector>

#include "checkpoint_arg.h"
#include "config.h"
#include "data/text.h"
#include "interrupt.h"
#include "nn/generate.h"
#include "train/checkpoint.h"
#include "train/device.h"
#include "train/init_from.h"
#include "train/trainer.h"
#include "train_command.h"
#include "util/cpus.h"
#include "util/error.h"

namespace kiln::app {
namespace fs = std::filesystem;

int run_sample(const SampleCommand& cmd) {
  if (cmd.tokens < 1) throw InputError(c10::str("--tokens: expected >= 1, found ", cmd.tokens));
  if (!(cmd.temperature >= 0.0) || !std::isfinite(cmd.temperature))
    throw InputError(c10::str("--temperature: expected a number >= 0 (0 = greedy), found ", cmd.temperature));
  if (cmd.top_k < 0) throw InputError(c10::str("--top-k: expected >= 0 (0 = all), found ", cmd.top_k));
  if (cmd.threads < 0 || cmd.threads > train::kMaxThreads)
    throw InputError(c10::str("--threads: expected an integer in 0..", train::kMaxThreads, " (0 = the CPUs this process may use), found ",
                              cmd.threads));
  const auto choice = checkpoint_argument(cmd.checkpoint, cmd.best);
  const std::string& checkpoint = choice.dir;
  const int64_t step = train::verify_checkpoint(checkpoint);

  // The model as the run built it: its config, sized by its data schema.
  const auto config_text = train::read_checkpoint_file(checkpoint, "config.toml");
  const auto schema_read = train::read_data_schema(checkpoint);
  if (!config_text || !schema_read) {
    std::vector<std::string> missing;
    if (!config_text) missing.push_back("config.toml");
    if (!schema_read) missing.push_back(train::kDataFile);
    throw InputError(c10::str(checkpoint, ": expected config.toml and ", train::kDataFile,
                              " in the checkpoint (written by kiln since the text format), found no ",
                              c10::Join(" and no ", missing)));
  }
  const std::string config_path = (fs::path(checkpoint) / "config.toml").string();
  const std::string data_path = (fs::path(checkpoint) / train::kDataFile).string();
  Config config = parse_config(*config_text, config_path);
  validate(config);
  const auto& schema = *schema_read;
  if (!nn::takes_tokens(config.model.name) || !data::takes_tokens(schema))
    throw InputError(c10::str(config_path, ": model.name: expected a language model trained on "
                              "text (gpt), found \"", config.model.name, "\" on ", schema.format, " data"));
  auto spec = to_run_spec(config).model;
  nn::fit_to_data(spec, schema.input_shape, data::model_input_size(schema), schema.outputs, true);
  nn::Gpt model(spec.gpt);
  train::init_from(*model, checkpoint);
  const auto device = train::resolve_device(cmd.device);
  util::set_threads(cmd.threads);
  model->to(device);
  model->eval();

  const auto vocab = data::Vocabulary::from_json(
      nlohmann::json::parse(schema.transform.at("vocabulary").dump()), data_path + ": transform.vocabulary");
  // No prompt: the text starts as after a new line, or a space where the training text
  // had no line ends (the context the model conditions on; neither is printed).
  std::string prompt = cmd.prompt;
  if (prompt.empty()) {
    const auto knows = [&](const char* text) {
      try {
        vocab.encode(text);
        return true;
      } catch (const InputError&) {
        return false;
      }
    };
    if (!knows("\n") && !knows(" "))
      throw InputError(c10::str("--prompt: expected text to continue, found none, and the model knows neither a "
                                "new line nor a space (what no prompt starts from): give --prompt TEXT in the ",
                                vocab.size(), " characters of its training text"));
    prompt = knows("\n") ? "\n" : " ";
  }
  at::Tensor ids;
  try {
    ids = vocab.encode(prompt);
  } catch (const InputError& e) {
    throw InputError(c10::str("--prompt: ", e.what(), " (the model knows only the ", vocab.size(),
                              " characters of its training text)"));
  }
  // The text streams out token by token. SIGINT/SIGTERM/SIGHUP stop it after the token
  // being chosen (a second one at once), and a reader that closes stdout (| head) after
  // the token it refused; either way what was printed stands and the line is ended.
  const InterruptGuard interrupt;  // SIGPIPE ignored: a closed stdout fails the write
  bool closed = false;
  int64_t made = 0;
  std::cout << cmd.prompt << std::flush;
  const auto start = std::chrono::steady_clock::now();
  nn::generate(*model, ids,
               nn::GenerateOptions()
                   .tokens(cmd.tokens)
                   .temperature(cmd.temperature)
                   .top_k(cmd.top_k)
                   .seed(cmd.seed)
                   .cache(cmd.cache)
                   .on_token([&](int64_t id) {
                     std::cout << vocab.token_text(id) << std::flush;
                     closed = !std::cout;
                     made += !closed;
                     return !closed && interrupt.requested() == 0;
                   }));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!closed) std::cout << "\n" << std::flush;
  const int signal = interrupt.requested();
  std::string count = std::to_string(made), stopped;
  if (made < cmd.tokens) count += c10::str(" of ", cmd.tokens);
  if (signal) stopped = c10::str("; stopped by ", InterruptGuard::name(signal));
  if (closed) stopped = "; stopped: standard output was closed";
  std::fprintf(stderr, "kiln: %s tokens in %.2f s (%.0f tokens/s, %s, %s, step %lld of %s%s%s%s)\n",
               count.c_str(), seconds, made / std::max(seconds, 1e-9),
               cmd.cache ? "key/value cache" : "no cache", device.str().c_str(),
               static_cast<long long>(step), checkpoint.c_str(), choice.why.empty() ? "" : ", ",
               choice.why.c_str(), stopped.c_str());
  return signal ? InterruptGuard::exit_code(signal) : 0;
}

namespace {

// A numeric option's value, parsed here rather than by cxxopts (whose message names
// the value but not the option): "--tokens: expected an integer, found 'many'".
template <typename T>
T number_option(const cxxopts::ParseResult& args, const std::string& name) {
  const auto text = args[name].as<std::string>();
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    throw InputError(c10::str("--", name, ": expected ",
                              std::is_floating_point_v<T> ? "a number"
                              : std::is_unsigned_v<T>     ? "an integer >= 0"
                                                          : "an integer",
                              ", found '", text, "' (see kiln sample --help)"));
  return value;
}

}  // namespace

int sample_main(int argc, char** argv) {
  cxxopts::Options options("kiln sample", "Generate text with a trained gpt checkpoint.");
  options.custom_help("CHECKPOINT [--best] [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--seed S]");
  options.positional_help("");
  options.add_options()
      ("checkpoint", "a checkpoint directory, or a run directory (its newest checkpoint)",
       cxxopts::value<std::string>())
      ("best", "with a run directory: its best checkpoint by the run's checkpoint.best metric, not its newest")
      ("prompt", "text to continue; empty: as after a new line (or a space, for a text without line ends)", cxxopts::value<std::string>()->default_value(""))
      ("tokens", "tokens to generate", cxxopts::value<std::string>()->default_value("200"))
      ("temperature", "softmax temperature; 0 = always the most likely token",
       cxxopts::value<std::string>()->default_value("0.8"))
      ("top-k", "sample among the K most likely tokens; 0 = all", cxxopts::value<std::string>()->default_value("0"))
      ("seed", "seed of the sampling", cxxopts::value<std::string>()->default_value("0"))
      ("no-cache", "recompute the whole context for every token (no key/value cache)")
      ("device", "cpu, cuda or cuda:N", cxxopts::value<std::string>()->default_value("cpu"))
      ("threads", "CPU threads; 0 = the CPUs this process may use (affinity, container quota)", cxxopts::value<std::string>()->default_value("0"))
      ("h,help", "show this help");
  options.parse_positional({"checkpoint"});
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help();
    return 0;
  }
  if (!args.count("checkpoint"))
    throw InputError("CHECKPOINT: expected a checkpoint or run directory (see kiln sample --help)");
  SampleCommand cmd;
  cmd.checkpoint = args["checkpoint"].as<std::string>();
  cmd.prompt = args["prompt"].as<std::string>();
  cmd.tokens = number_option<int64_t>(args, "tokens");
  cmd.temperature = number_option<double>(args, "temperature");
  cmd.top_k = number_option<int64_t>(args, "top-k");
  cmd.seed = number_option<uint64_t>(args, "seed");
  cmd.cache = args.count("no-cache") == 0;
  cmd.best = args.count("best") > 0;
  cmd.device = args["device"].as<std::string>();
  cmd.threads = number_option<int64_t>(args, "threads");
  return run_sample(cmd);
}

}  // namespace kiln::app
