// The exception kiln throws for bad user input (a config, a data file, a
// checkpoint): the app turns it into its message and exit code 2.
#pragma once
#include <stdexcept>
#include <string>

namespace kiln {

/// Example: throw InputError("data/x.idx: truncated: expected 784 bytes, found 3");
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace kiln
