// The exception kiln throws for bad user input (a config, a data file, a
// checkpoint): the app turns it into its message and exit code 2.
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

namespace kiln {

/// Example: throw InputError("data/x.idx: truncated: expected 784 bytes, found 3");
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// `text` safe to print on a terminal: valid UTF-8 and newlines and tabs kept, every
/// other byte — a control character, a byte of no valid UTF-8 sequence, as a file's
/// own bytes quoted in a message may be — written as \xNN.
/// Example: printable("bad \x80\x1b[2J") == "bad \\x80\\x1b[2J"
std::string printable(std::string_view text);

}  // namespace kiln
