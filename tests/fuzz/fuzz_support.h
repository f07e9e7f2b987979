// What every kiln fuzz target shares: a scratch folder for the parsers that read
// paths, and the property each target checks — bad input is a kiln::InputError (exit
// code 2 with a message), never another exception, a crash, a sanitizer report, a hang
// or an allocation past libFuzzer's limit.
#pragma once
#include <c10/util/Exception.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "util/error.h"
#include "util/files.h"

namespace kiln::fuzz {

/// A folder of this process's own under /dev/shm (or $TMPDIR), removed at exit.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : std::getenv("TMPDIR");
    std::string tmpl = std::string(base ? base : "/tmp") + "/kiln-fuzz-XXXXXX";
    if (!mkdtemp(tmpl.data())) std::abort();
    // The handler runs after `dir` is destroyed (registered before it was made), so it
    // keeps a copy of its own that lives to the end.
    static const std::string* const removed_at_exit = new std::string(tmpl);
    std::atexit([] { std::error_code ec; kiln::files::remove_tree(*removed_at_exit, ec); });
    return std::filesystem::path(tmpl);
  }();
  return dir;
}

/// Writes `bytes` into `path` (no fsync: a scratch file in memory).
inline void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// Writes `bytes` into the scratch file `name`; returns its path.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = (scratch() / name).string();
  write_file(path, bytes);
  return path;
}

/// Runs `fn`; a kiln::InputError is the expected outcome of bad input (kiln prints it
/// and exits with 2). Any other exception escaping is a finding: kiln would print a
/// bare library message and exit 1, so the target aborts and libFuzzer keeps the input.
template <typename Fn>
bool only_input_errors(Fn&& fn) {
  try {
    fn();
    return true;
  } catch (const kiln::InputError&) {
    return false;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "kiln fuzz: c10::Error escaped (exit 1, not 2): %s\n",
                 e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln fuzz: std::exception escaped (exit 1, not 2): %s\n", e.what());
  }
  std::abort();
}

}  // namespace kiln::fuzz
