// Fuzz target: IDX files (kiln::data::read_idx), plain and gzip. The first byte picks
// how the rest reaches the reader: even, as the file's bytes (plain or gzip as they
// are); odd, gzip-compressed first, so mutations reach the IDX parser beneath a valid
// gzip stream instead of stopping at its CRC.
#include <zlib.h>

#include "data/idx.h"
#include "fuzz_support.h"

namespace {

std::string gzip(std::string_view in) {
  z_stream z{};
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) std::abort();
  std::string out(deflateBound(&z, in.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) std::abort();
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string path = data[0] & 1 ? kiln::fuzz::write_scratch("f-idx3-ubyte.gz", gzip(body))
                                       : kiln::fuzz::write_scratch("f-idx3-ubyte", body);
  kiln::fuzz::only_input_errors([&] { kiln::data::read_idx(path); });
  return 0;
}
