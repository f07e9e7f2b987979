// NumPy's .npz archives (numpy.savez, numpy.savez_compressed): a ZIP file of .npy
// entries, read into named tensors — stored entries without a copy where alignment
// allows — and written (stored, aligned) so NumPy and kiln both read them back.
// The ZIP subset NumPy writes (stored or deflate, ZIP64) is small and fully specified
// (PKWARE APPNOTE 6.3); reading it ourselves gives one shared mapping and checks that
// name the byte, which a general zip library does not.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace kiln::data {

/// Tensors by name, in archive order.
using NamedArrays = std::vector<std::pair<std::string, at::Tensor>>;

/// Reads every entry of an .npz as a CPU tensor named as NumPy names it (the entry's
/// name without its `.npy` suffix), in archive order. The archive is mapped once,
/// private and copy-on-write; a stored entry whose data lies at a multiple of its
/// element size in the file is wrapped in that mapping without a copy (the mapping
/// lives as long as any tensor of it), other stored entries are copied, and deflated
/// entries are inflated into a buffer of their own. Every entry's CRC-32 is checked.
/// The .npy inside is checked as read_npy checks it (dtypes, byte order, fortran_order,
/// shape against size). A malformed archive — truncated, bad signatures or sizes, ZIP64
/// records that disagree, an encrypted entry, a method other than stored/deflate, a
/// CRC mismatch, a local header that disagrees with the central directory, overlapping
/// or duplicate entries — throws kiln::InputError naming the file, the entry, the byte
/// offset and field, what was expected and what was found. An archive with no entries
/// gives an empty list.
/// Example: for (auto& [name, t] : kiln::data::read_npz("data.npz")) …  // "x", "y"
NamedArrays read_npz(const std::string& path);

/// Writes `arrays` as an .npz that numpy.load reads: one stored (uncompressed) .npy
/// entry `<name>.npy` per tensor (any device or strides; copied to contiguous CPU), each
/// array's data aligned to 64 bytes in the file so read_npz maps it without a copy, in
/// the ZIP64 layout at every size, fsync'ed. An empty or duplicate name, or a dtype
/// NumPy has no equivalent for, throws kiln::InputError.
/// Example: kiln::data::write_npz("out.npz", {{"x", x}, {"y", y}});
void write_npz(const std::string& path, const NamedArrays& arrays);

}  // namespace kiln::data
