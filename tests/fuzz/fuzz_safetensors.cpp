// Fuzz target: safetensors files (kiln::safetensors::deserialize), what model.safetensors
// of every checkpoint and `--init-from` read.
#include "fuzz_support.h"
#include "util/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  kiln::fuzz::only_input_errors([&] { kiln::safetensors::deserialize(bytes, "fuzz.safetensors"); });
  return 0;
}
