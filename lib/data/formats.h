// The readers load_data() dispatches to, one per format (internal to lib/data):
// each reads its files, fits the schema on the training split (or applies `saved`)
// and returns both splits.
#pragma once
#include "data/dataset.h"

namespace kiln::data {

Data idx_data(const DataOptions& options, const DataSchema* saved);    // dataset.cpp
Data array_data(const DataOptions& options, const DataSchema* saved);  // arrays.cpp
Data text_data(const DataOptions& options, const DataSchema* saved);   // text_data.cpp

}  // namespace kiln::data
