// Command-line values that name a file or a directory, shared by the commands.
#pragma once
#include <cxxopts.hpp>

#include <string>

#include "util/error.h"

namespace kiln::app {

/// The path `option` gives, or "" where the command line does not give it. A value
/// given as "" (an unset shell variable: --resume "$RUN") names nothing and is refused
/// (kiln::InputError, exit 2), where taking it for "not given" would start a new run
/// or read the default config. `label` names the option in the message ("--resume",
/// "CONFIG"), `expected` what it takes.
/// Example: cmd.resume_dir = given_path(args, "resume", "--resume", "a run directory");
inline std::string given_path(const cxxopts::ParseResult& args, const std::string& option,
                              const std::string& label, const std::string& expected) {
  if (!args.count(option)) return "";
  auto value = args[option].as<std::string>();
  if (value.empty()) throw InputError(label + ": expected " + expected + ", found an empty name");
  return value;
}

}  // namespace kiln::app
