// Fuzz target: NumPy files — .npy (kiln::data::read_npy) when the first byte is even,
// .npz archives (read_npz, zip with stored or deflated members) when it is odd; the
// rest is the file.
#include "data/npy.h"
#include "data/npz.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    const std::string path = kiln::fuzz::write_scratch("fuzz.npz", bytes);
    kiln::fuzz::only_input_errors([&] { kiln::data::read_npz(path); });
  } else {
    const std::string path = kiln::fuzz::write_scratch("fuzz.npy", bytes);
    kiln::fuzz::only_input_errors([&] { kiln::data::read_npy(path); });
  }
  return 0;
}
