// Reader for the IDX format of (Fashion-)MNIST, gzipped or plain.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>

namespace kiln::data {

/// Reads an IDX file of unsigned bytes (magic 0x0000080N, N = rank 1..4) into a
/// uint8 tensor of its dimensions, streaming through zlib (a .gz file is inflated,
/// a plain one read as is). A missing, truncated, over-long or foreign file throws
/// kiln::InputError naming the file and what was wrong.
/// Example: auto labels = kiln::data::read_idx("t10k-labels-idx1-ubyte.gz");  // (10000)
at::Tensor read_idx(const std::string& path);

/// Writes `t` (uint8, rank 1..4) as IDX, gzipped when `path` ends in ".gz".
/// Example: kiln::data::write_idx("x.idx.gz", images);
void write_idx(const std::string& path, const at::Tensor& t);

}  // namespace kiln::data
