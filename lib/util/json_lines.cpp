// JsonLines: opened in append mode and flushed per line, so a crash loses nothing
// that was written.
#include "util/json_lines.h"

#include <c10/util/Exception.h>

namespace kiln {

JsonLines::JsonLines(const std::string& path) : path_(path), out_(path, std::ios::app) {
  TORCH_CHECK(out_.good(), "cannot open ", path, " for appending");
}

void JsonLines::write(const nlohmann::json& object) {
  out_ << object.dump() << '\n';
  out_.flush();
}

}  // namespace kiln
