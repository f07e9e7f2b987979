#include "util/env_switch.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace kiln::util {

std::size_t env_switch(const char* name, std::initializer_list<const char*> words) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return 0;
  std::string expected;
  std::size_t i = 0;
  for (const char* word : words) {
    if (!std::strcmp(env, word)) return i;
    expected += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + std::string(word);
    ++i;
  }
  TORCH_WARN(name, ": expected ", expected, ", got '", env, "'; using ", *words.begin());
  return 0;
}

}  // namespace kiln::util
