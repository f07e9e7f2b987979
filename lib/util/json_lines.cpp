// JsonLines: opened in append mode, each line written whole at once, so a crash
// loses nothing that was written and a refused write is reported; and the cut of a
// file back to a step, for a resume.
#include "util/json_lines.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "util/error.h"
#include "util/files.h"

namespace kiln {

JsonLines::JsonLines(const std::string& path)
    : path_(path), fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) {
  if (fd_ < 0) throw IoError(path, "open the file for appending", errno);
}

JsonLines::~JsonLines() {
  if (fd_ >= 0) ::close(fd_);
}

void JsonLines::write(const nlohmann::json& object) { append(object.dump() + '\n'); }

void JsonLines::append(std::string_view lines) {
  std::string_view rest = lines;
  while (!rest.empty()) {
    const ssize_t n = ::write(fd_, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    // A line cut short by a full disk is the "last line cut short" a resume removes.
    if (n < 0) throw IoError(path_, "write", errno);
    rest.remove_prefix(static_cast<size_t>(n));
  }
}

int64_t move_json_lines_after(const std::string& path, int64_t step, const std::string& side_path) {
  std::ifstream in(path);
  if (!in.good()) throw IoError(path, "read", errno);
  std::string keep, move;
  int64_t moved = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    // A last line that is not JSON was cut short by a crash: it goes too, or the lines
    // the resumed run appends would follow it and leave a broken line in the middle.
    const bool cut = j.is_discarded() && in.peek() == std::char_traits<char>::eof();
    const bool later = cut || (j.is_object() && j.contains("step") && j["step"].is_number() &&
                               j["step"].get<double>() > static_cast<double>(step));
    (later ? move : keep) += line + '\n';
    moved += later;
  }
  if (moved == 0) return 0;
  {
    JsonLines side(side_path);
    side.append(move);
  }
  // The side file first: a crash in between duplicates lines, never loses them.
  files::replace_synced(path, keep);
  return moved;
}

bool has_json_line(const std::string& path, const std::string& split, int64_t step) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.find(split) == std::string::npos) continue;  // not parsed: a long run has many lines
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("split") && j["split"] == split && j.contains("step") && j["step"].is_number() &&
        j["step"].get<double>() == static_cast<double>(step))
      return true;
  }
  return false;
}

}  // namespace kiln
