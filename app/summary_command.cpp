// run_summary(): the config resolved as kiln train resolves it, summarised by
// lib/train (train::summarize) and printed.
#include "summary_command.h"

#define CXXOPTS_VECTOR_DELIMITER '\0'  // as in main.cpp: --set values may contain commas: [512,256]
#include <c10/util/StringUtil.h>
#include <cxxopts.hpp>

#include <cstdio>
#include <iostream>

#include "arguments.h"
#include "config.h"
#include "train/summary.h"
#include "train_command.h"

namespace kiln::app {

void print_summary(const train::RunSpec& spec, const std::string& heading) {
  const auto summary = train::summarize(spec);
  std::printf("%s\n\n%s", heading.c_str(), summary.table().c_str());
  std::fflush(stdout);
}

int run_summary(const SummaryCommand& cmd) {
  const std::string path = cmd.config_path.empty() ? default_config_path() : cmd.config_path;
  const Config config = resolve_config(path, cmd.overrides);
  print_summary(to_run_spec(config), "kiln summary: " + path);
  return 0;
}

int summary_main(int argc, char** argv) {
  cxxopts::Options options("kiln summary",
                           "Show the model a config builds and estimate a training step's memory.");
  options.custom_help("[CONFIG] [--set section.key=value ...]");
  options.positional_help("");
  options.add_options()
      ("config", "TOML config file", cxxopts::value<std::string>()->default_value(""))
      ("set", "override one config key: section.key=value (repeatable)",
       cxxopts::value<std::vector<std::string>>())
      ("h,help", "show this help");
  options.parse_positional({"config"});
  SummaryCommand cmd;
  try {
    const auto args = options.parse(argc, argv);
    if (args.count("help")) {
      std::cout << options.help() << "\nCONFIG defaults to " << default_config_path()
                << "; it is resolved as 'kiln train' resolves it ('kiln train --help' lists the keys).\n"
                   "Prints every module (type, output shape for one batch, parameters, bytes), the totals\n"
                   "and the memory of a training step at train.batch_size and train.precision on\n"
                   "train.device: parameters, gradients, optimizer state and activations, measured on\n"
                   "the meta device where the whole step runs there, else by short steps on the device.\n"
                   "Nothing is written.\n";
      return 0;
    }
    cmd.config_path = given_path(args, "config", "CONFIG", "a TOML config file");
    if (args.count("set")) cmd.overrides = args["set"].as<std::vector<std::string>>();
  } catch (const cxxopts::exceptions::exception& e) {
    throw InputError(c10::str(e.what(), " (see kiln summary --help)"));
  }
  return run_summary(cmd);
}

}  // namespace kiln::app
