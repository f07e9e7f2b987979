// Keeps what libraries write to stderr on their own (Kineto, c10's log, c10d's
// connection retries with their stack traces) off kiln's console: while a
// StderrToLog lives, file descriptor 2 goes to a temporary file whose lines are
// then written to kiln's log (train.log), each after `prefix`.
#pragma once
#include <cstdio>
#include <string>

namespace kiln {

/// Example: { StderrToLog quiet("store: "); connect(); }  // connect()'s stderr lands in the log
class StderrToLog {
 public:
  explicit StderrToLog(std::string prefix);
  ~StderrToLog();
  StderrToLog(const StderrToLog&) = delete;
  StderrToLog& operator=(const StderrToLog&) = delete;

 private:
  std::string prefix_;
  std::FILE* file_ = nullptr;
  int saved_ = -1;
};

}  // namespace kiln
