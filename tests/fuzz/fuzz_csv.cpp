// Fuzz target: CSV tables as `data.format = "csv"` reads them — the parser
// (kiln::data::parse_csv) and the table's typing, one-hot encoding, missing values and
// standardisation (load_data). The first byte picks the options (delimiter, missing,
// unseen, task); the rest is the file; its last header column is the label.
#include "data/csv.h"
#include "data/dataset.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  const char* delimiters[] = {",", ";", "\t", "|"};
  const char* missing[] = {"error", "drop", "mean", "error"};
  const char* tasks[] = {"auto", "classification", "regression", "auto"};
  const std::string delimiter = delimiters[pick & 3];
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  kiln::data::CsvTable table;
  if (!kiln::fuzz::only_input_errors([&] {
        kiln::data::CsvOptions options;
        options.delimiter = delimiter[0];
        table = kiln::data::parse_csv(bytes, "fuzz.csv", options);
      }))
    return 0;
  const std::string path = kiln::fuzz::write_scratch("fuzz.csv", bytes);
  kiln::fuzz::only_input_errors([&] {
    kiln::data::load_data(kiln::data::DataOptions()
                              .format("csv")
                              .train(path)
                              .label(table.header.back())
                              .delimiter(delimiter)
                              .missing(missing[(pick >> 2) & 3])
                              .unseen(pick & 16 ? "zero" : "error")
                              .task(tasks[(pick >> 5) & 3])
                              .standardize(!(pick & 128))
                              .test_fraction(0.5));
  });
  return 0;
}
