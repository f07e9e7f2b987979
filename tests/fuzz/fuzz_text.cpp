// Fuzz target: text corpora as `data.format = "text"` reads them — strict UTF-8
// (kiln::data::read_text), the character or byte vocabulary, and the windows
// (load_data). The first byte picks the options (vocabulary, block size 1–8, stride
// 1–4, sequence targets); the rest is the file.
#include "data/dataset.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  const std::string path = kiln::fuzz::write_scratch(
      "fuzz.txt", std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  kiln::fuzz::only_input_errors([&] {
    kiln::data::load_data(kiln::data::DataOptions()
                              .format("text")
                              .train(path)
                              .vocabulary(pick & 1 ? "byte" : "char")
                              .block_size(1 + ((pick >> 1) & 7))
                              .stride(1 + ((pick >> 4) & 3))
                              .sequence(pick & 64)
                              .windows(pick & 128 ? "random" : "strided")
                              .test_fraction(0.25));
  });
  return 0;
}
