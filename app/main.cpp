// The kiln executable: parses the command line, runs the command, and turns
// every error into one message and an exit code: 2 for bad input, 74 (sysexits.h's
// EX_IOERR) for a file system that refused (full, read-only, gone), 1 for the rest.
#define CXXOPTS_VECTOR_DELIMITER '\0'  // --set values may contain commas: [512,256]
#include <c10/util/Exception.h>
#include <cxxopts.hpp>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "arguments.h"
#include "config.h"
#include "export_command.h"
#include "report_command.h"
#include "sample_command.h"
#include "summary_command.h"
#include "train_command.h"
#include "util/error.h"
#include "util/heap.h"

namespace {

// An environment failure: the run's data or directory is fine, the file system is not.
constexpr int kExitIoError = 74;

constexpr const char* kUsage =
    "kiln - native C++ training on libtorch\n"
    "\n"
    "Usage: kiln <command> [options]\n"
    "\n"
    "Commands:\n"
    "  train [CONFIG]   train a model from a TOML config (default configs/fashion_mlp.toml)\n"
    "  export CKPT      write a checkpoint's weights as safetensors, .npy files or a .pt file\n"
    "  sample CKPT      generate text with a trained gpt checkpoint\n"
    "  summary [CONFIG] the model a config builds, module by module, and a training step's memory\n"
    "  report RUN...    write one HTML page of runs' curves, final metrics and configs\n"
    "\n"
    "Options:\n"
    "  -h, --help       show this help\n"
    "      --version    show kiln's version and the libtorch it was built with\n"
    "      --heap-env   print the environment that gives another process kiln's heap policy\n"
    "                   (a benchmark's Python twin: env $(kiln --heap-env) python ...)\n"
    "\n"
    "'kiln train --help' lists the train options and every config key with its default;\n"
    "'kiln export --help' the export options and formats; 'kiln sample --help' the sampling options.\n";

int train_main(int argc, char** argv) {
  cxxopts::Options options("kiln train", "Train a model from a TOML config.");
  options.custom_help("[CONFIG] [--set section.key=value ...] [options]");
  options.positional_help("");
  options.add_options()
      ("config", "TOML config file", cxxopts::value<std::string>()->default_value(""))
      ("set", "override one config key: section.key=value (repeatable)",
       cxxopts::value<std::vector<std::string>>())
      ("run-dir", "write the run here instead of run.dir/run.name", cxxopts::value<std::string>())
      ("resume", "continue a run: a run directory (its newest checkpoint), a checkpoint "
                 "directory, or 'latest' (the most recent run under ./runs)",
       cxxopts::value<std::string>())
      ("profile", "profile steps A:B with PyTorch's profiler (RUN/profile/): \"steps=A:B\" or \"A:B\", "
                  "optionally with other profile keys, e.g. \"steps=101:105,memory=false\"",
       cxxopts::value<std::string>())
      ("quiet", "print the result only (no progress, no per-epoch lines)")
      ("log-format", "console output: text, or json (one JSON object per line, for programs)",
       cxxopts::value<std::string>()->default_value("text"))
      ("print-config", "print the resolved config and exit")
      ("dry-run", "print the model summary (as kiln summary) and the run directory, and exit "
                  "without writing anything")
      ("h,help", "show this help");
  options.parse_positional({"config"});
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << "\nCONFIG defaults to " << kiln::app::default_config_path()
              << "\n\nConfig keys (set in the file's [section] or with --set section.key=value):\n"
              << kiln::app::describe_keys();
    return 0;
  }
  kiln::app::TrainCommand cmd;
  cmd.config_path = kiln::app::given_path(args, "config", "CONFIG", "a TOML config file");
  if (args.count("set")) cmd.overrides = args["set"].as<std::vector<std::string>>();
  cmd.run_dir = kiln::app::given_path(args, "run-dir", "--run-dir", "a directory for the run");
  cmd.resume_dir = kiln::app::given_path(args, "resume", "--resume",
                                         "a run directory, a checkpoint directory or 'latest'");
  if (args.count("profile")) {
    // --profile SPEC is a shorthand for --set profile.KEY=VALUE, after the --set ones.
    const auto spec = args["profile"].as<std::string>();
    size_t start = 0;
    while (start <= spec.size()) {
      const auto comma = std::min(spec.find(',', start), spec.size());
      const auto part = spec.substr(start, comma - start);
      const bool keyed = part.find('=') != std::string::npos;
      cmd.overrides.push_back(keyed ? "profile." + part : "profile.steps=\"" + part + "\"");
      start = comma + 1;
    }
  }
  cmd.print_config = args.count("print-config") > 0;
  cmd.quiet = args.count("quiet") > 0;
  cmd.log_format = args["log-format"].as<std::string>();
  cmd.dry_run = args.count("dry-run") > 0;
  return kiln::app::run_train(cmd);
}

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "kiln: error: COMMAND: expected one of train, export, sample, summary, report, "
                         "found none\n\n%s", kUsage);
    return 2;
  }
  if (!std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("kiln %s (libtorch %s)\n", KILN_VERSION, KILN_TORCH_VERSION);
    return 0;
  }
  if (!std::strcmp(argv[1], "--heap-env")) {
    std::printf("%s\n", kiln::heap::policy_environment().c_str());
    return 0;
  }
  if (!std::strcmp(argv[1], "train")) return train_main(argc - 1, argv + 1);
  if (!std::strcmp(argv[1], "export")) return kiln::app::export_main(argc - 1, argv + 1);
  if (!std::strcmp(argv[1], "sample")) return kiln::app::sample_main(argc - 1, argv + 1);
  if (!std::strcmp(argv[1], "summary")) return kiln::app::summary_main(argc - 1, argv + 1);
  if (!std::strcmp(argv[1], "report")) return kiln::app::report_main(argc - 1, argv + 1);
  std::fprintf(stderr, "kiln: error: unknown command '%s'; valid commands: train, export, sample, summary, report (see kiln --help)\n",
               argv[1]);
  return 2;
}

// "kiln: error: …" on stderr after whatever the run printed on stdout: where both go
// to one file (`kiln train … > log 2>&1`) the error is then the last line, not one
// that stdout's buffer overtakes.
__attribute__((format(printf, 1, 2))) void error_line(const char* format, ...) {
  std::fflush(stdout);
  std::fputs("kiln: error: ", stderr);
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fflush(stderr);
}

}  // namespace

int main(int argc, char** argv) {
  // Before the first tensor: a step's freed memory stays for the next, and large
  // tensors go on huge pages (util/heap.h).
  kiln::heap::set_training_policy();
  try {
    return run(argc, argv);
  } catch (const kiln::InputError& e) {  // messages may quote a file's bytes: printable() escapes them
    error_line("%s\n", kiln::printable(e.what()).c_str());
    return 2;
  } catch (const kiln::IoError& e) {
    error_line("%s\n", kiln::printable(e.what()).c_str());
    return kExitIoError;
  } catch (const std::filesystem::filesystem_error& e) {
    error_line("%s\n", kiln::printable(kiln::IoError(e).what()).c_str());
    return kExitIoError;
  } catch (const cxxopts::exceptions::exception& e) {  // the command's own options: argv[1] is it
    error_line("%s (see kiln %s --help)\n", kiln::printable(e.what()).c_str(),
               kiln::printable(argc > 1 ? argv[1] : "train").c_str());
    return 2;
  } catch (const c10::Error& e) {
    error_line("%s\n", kiln::printable(e.what_without_backtrace()).c_str());
    return 1;
  } catch (const std::exception& e) {
    error_line("%s\n", kiln::printable(e.what()).c_str());
    return 1;
  }
}
