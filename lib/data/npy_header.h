// What the .npy and .npz readers share (internal to lib/data): the .npy header parser,
// the wrapping of an .npy's data in a tensor that keeps its owner (a file mapping or an
// inflated buffer) alive, the header write_npy and write_npz write, and file mapping.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace kiln::data::npy {

/// Names the bytes in errors: `name` starts each message ("x.npy", or
/// "a.npz: entry 'w.npy' at byte 55") and `noun` says what holds them ("the file").
struct Source {
  std::string name;
  std::string noun = "the file";
};

/// The header dict: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
struct Header {
  at::ScalarType dtype;  // kUInt32 for strings (code points)
  bool fortran_order;
  std::vector<int64_t> shape;
  size_t data_offset = 0;  // from the start of the .npy to its first data byte
  int64_t numel = 0;
  std::string descr;       // as the file has it: '<f4', '|S7', '>i8'
  int64_t itemsize = 0;    // bytes of one element in the file
  int64_t chars = 0;       // strings: characters per element ('U': 4 bytes each, 'S': 1); 0 for numbers
  bool unicode = false;    // 'U' (UCS-4) rather than 'S' (bytes)
  bool big_endian = false; // '>' on a type of more than one byte: swapped into a copy on reading

  /// Element strides: row-major, or column-major for fortran_order.
  std::vector<int64_t> strides() const;
};

/// Parses and checks the .npy in bytes[0, size): magic, version 1.0/2.0/3.0, the header
/// dict (descr, fortran_order, shape), and that the data after the header is exactly
/// shape × itemsize bytes. Throws kiln::InputError naming `src` and the field.
/// Example: const Header h = parse(bytes, size, {path});
Header parse(const unsigned char* bytes, size_t size, const Source& src);

/// The .npy in bytes[0, size) as a CPU tensor. Strings ('<U5', '|S7') come as uint32
/// code points of shape [*shape, chars], NUL-padded as NumPy pads them (a copy); big-
/// endian numbers as a byte-swapped copy. Otherwise zero-copy — the tensor points into
/// `bytes` and holds `owner` until its storage goes — when the data's address is a
/// multiple of the element size; otherwise a copy (an unaligned int64 or double is
/// undefined behaviour in C++ and slow or faulting in vectorised kernels).
/// Example: at::Tensor t = wrap(map->data, map->size, map, {path});
at::Tensor wrap(const unsigned char* bytes, size_t size, std::shared_ptr<const void> owner,
                const Source& src);

/// What write_npy writes before the data of the contiguous CPU tensor `c`: magic,
/// version 1.0 (2.0 when the header needs it) and the header, padded with spaces so the
/// data starts at a multiple of 64 bytes from the start of the .npy, as NumPy does.
/// A dtype NumPy has no equivalent for throws kiln::InputError naming `path`.
std::string preamble(const at::Tensor& c, const std::string& path);

/// A whole file mapped private and writable: writes go to copies of the pages, never
/// the file. Unmapped when the last shared_ptr (a tensor's storage) goes.
struct Mapping {
  unsigned char* data = nullptr;
  size_t size = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();
};

/// Maps `path`; a missing file or one that is not a regular file throws
/// kiln::InputError ("expected a regular <kind> file").
std::shared_ptr<const Mapping> map_file(const std::string& path, const std::string& kind);

}  // namespace kiln::data::npy
