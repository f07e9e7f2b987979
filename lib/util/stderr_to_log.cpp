// StderrToLog: dup2 of a tmpfile over fd 2, undone and read back line by line.
#include "util/stderr_to_log.h"

#include <unistd.h>

#include "util/log.h"

namespace kiln {

StderrToLog::StderrToLog(std::string prefix) : prefix_(std::move(prefix)) {
  std::fflush(stderr);
  file_ = std::tmpfile();
  saved_ = file_ ? ::dup(2) : -1;
  if (saved_ >= 0) ::dup2(::fileno(file_), 2);
}

StderrToLog::~StderrToLog() {
  if (saved_ < 0) {
    if (file_) std::fclose(file_);
    return;
  }
  std::fflush(stderr);
  ::dup2(saved_, 2);
  ::close(saved_);
  std::rewind(file_);
  char line[1024];
  while (std::fgets(line, sizeof line, file_)) {
    std::string text(line);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    if (!text.empty()) log::info(prefix_ + text);
  }
  std::fclose(file_);
}

}  // namespace kiln
