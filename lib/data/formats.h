// The readers load_data() dispatches to, one per format (internal to lib/data):
// each reads its files, fits the schema on the training split (or applies `saved`)
// and returns both splits.
#pragma once
#include <string>
#include <vector>

#include "data/dataset.h"

namespace kiln::data {

/// The first 8 names for a message, "a, b, …" past them.
/// Example: c10::str("the classes (", preview(schema.classes), ")")
inline std::string preview(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 8; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > 8) s += ", …";
  return s;
}

Data idx_data(const DataOptions& options, const DataSchema* saved);    // dataset.cpp
Data array_data(const DataOptions& options, const DataSchema* saved);  // arrays.cpp
Data text_data(const DataOptions& options, const DataSchema* saved);   // text_data.cpp

}  // namespace kiln::data
