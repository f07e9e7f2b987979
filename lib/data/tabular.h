// A CSV table as a data set: numeric columns standardised, string columns one-hot
// encoded, a label column as class ids or regression targets, missing values
// refused, dropped or filled — every statistic from the training rows only.
#pragma once
#include "data/csv.h"
#include "data/dataset.h"

namespace kiln::data {

/// The training and test splits of CSV tables: `test` may be null (then
/// options.test_fraction of the training rows are held out, seeded). With `saved`
/// the columns, categories, classes and statistics are that schema's; otherwise they
/// are fitted on the training rows. Throws kiln::InputError naming file, line and
/// column for any value that does not fit.
/// Example: auto d = kiln::data::table_data(read_csv("t.csv"), nullptr, options, nullptr);
Data table_data(const CsvTable& train, const CsvTable* test, const DataOptions& options,
                const DataSchema* saved);

}  // namespace kiln::data
