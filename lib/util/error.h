// The exceptions kiln throws for bad user input (a config, a data file, a
// checkpoint) and for a file system that refuses what a run needs (a full disk, a
// read-only or vanished directory): the app turns each into its message and exit
// code, 2 and 74.
#pragma once
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kiln {

/// Example: throw InputError("data/x.idx: truncated: expected 784 bytes, found 3");
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An environment failure: the operating system refused a file operation kiln needs
/// (no space left, a read-only file system, a directory gone, no permission). The
/// message names the path and the OS's reason (strerror); the app exits with 74,
/// sysexits.h's EX_IOERR. Example: throw IoError(path, "write", errno);
///   → "runs/x/metrics.jsonl: cannot write: No space left on device"
class IoError : public std::runtime_error {
 public:
  IoError(const std::string& path, const std::string& action, int error);
  /// A message of its own; `error` is the errno behind it.
  IoError(const std::string& message, int error) : std::runtime_error(message), error_(error) {}
  /// What std::filesystem reported, in the same words: "PATH: cannot ACTION: REASON".
  explicit IoError(const std::filesystem::filesystem_error& e);
  /// The errno (ENOSPC, EROFS, ENOENT, …).
  int error() const { return error_; }

 private:
  int error_;
};

/// `text` safe to print on a terminal: valid UTF-8 and newlines and tabs kept, every
/// other byte — a control character, a byte of no valid UTF-8 sequence, as a file's
/// own bytes quoted in a message may be — written as \xNN.
/// Example: printable("bad \x80\x1b[2J") == "bad \\x80\\x1b[2J"
std::string printable(std::string_view text);

}  // namespace kiln
