// JsonLines: opened in append mode and flushed per line, so a crash loses nothing
// that was written; and the cut of a file back to a step, for a resume.
#include "util/json_lines.h"

#include <c10/util/Exception.h>

#include <filesystem>

#include "util/files.h"

namespace kiln {

JsonLines::JsonLines(const std::string& path) : path_(path), out_(path, std::ios::app) {
  TORCH_CHECK(out_.good(), "cannot open ", path, " for appending");
}

void JsonLines::write(const nlohmann::json& object) {
  out_ << object.dump() << '\n';
  out_.flush();
}

int64_t move_json_lines_after(const std::string& path, int64_t step, const std::string& side_path) {
  std::ifstream in(path);
  TORCH_CHECK(in.good(), "cannot read ", path);
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
    std::ofstream side(side_path, std::ios::app);
    side << move;
    side.flush();
    TORCH_CHECK(side.good(), "cannot append to ", side_path);
  }
  // The side file first: a crash in between duplicates lines, never loses them.
  const std::string tmp = path + ".tmp";
  files::write_synced(tmp, keep);
  std::filesystem::rename(tmp, path);
  return moved;
}

}  // namespace kiln
