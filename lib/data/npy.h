// NumPy's .npy format, read memory-mapped into a tensor without a copy and written
// from one, so NumPy users can feed kiln arrays and inspect what it writes.
// The format is simple and fully specified (numpy.lib.format); no library on Debian or
// PyPI exposes it to C++ with zero-copy mapping and the checks below, so it is ours.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>

namespace kiln::data {

/// Reads an .npy file (format versions 1.0, 2.0 and 3.0) as a CPU tensor that wraps a
/// private memory map of the file: no copy is made, the mapping lives as long as the
/// tensor (and its views), and writing to the tensor never changes the file. Dtypes:
/// bool, uint8, int8, int16, int32, int64, float16, float32, float64; `fortran_order`
/// arrays are wrapped with column-major strides. Big-endian numbers come as a
/// byte-swapped copy; strings ('<U5' UCS-4, '|S7' bytes) as a copy of uint32 code
/// points of shape [*shape, chars], NUL-padded, row-major (the one use of kUInt32).
/// Anything else — magic, version, header, dtype, byte order, a shape that does not
/// match the file's size — throws kiln::InputError naming the file and the field.
/// Example: at::Tensor x = kiln::data::read_npy("features.npy");  // (N, D) float32
at::Tensor read_npy(const std::string& path);

/// Writes `t` (any device, any strides; copied to a contiguous CPU tensor) as a
/// version 1.0 .npy file (2.0 when the header needs it), fsync'ed. A dtype NumPy has
/// no equivalent for (bfloat16, complex) throws kiln::InputError.
/// Example: kiln::data::write_npy("logits.npy", logits);
void write_npy(const std::string& path, const at::Tensor& t);

}  // namespace kiln::data
