// The real Python readers against kiln's files: NumPy loads what write_npy writes and
// safetensors loads what kiln::safetensors writes; each saves the arrays again with its
// own writer, and kiln reads those back equal, dtype and shape included. Runs the torch
// wheel's virtual environment (KILN_TEST_PYTHON, set by ctest), where scripts/setup
// installs numpy and safetensors; reported as skipped without them.
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>

#include "data/npy.h"
#include "support.h"
#include "util/safetensors.h"

TEST_CASE("NumPy and safetensors read kiln's files, and kiln reads theirs back equal",
          "[interop][npy][safetensors]") {
  const auto py = kiln::test::python_or_skip("numpy, safetensors.torch");
  if (!py) return;
  kiln::test::TempDir dir;
  torch::manual_seed(5);
  const kiln::safetensors::NamedTensors tensors = {
      {"weight", at::randn({4, 3}).t()},  // a transposed view
      {"half", at::randn({7}).to(at::kHalf)},
      {"index", at::randint(-1000, 1000, {2, 2, 2}, at::kLong)},
      {"mask", at::rand({5}) > 0.5},
      {"scalar", at::scalar_tensor(2.5, at::kDouble)},
      {"empty", at::empty({0, 3}, at::kByte)},
      {"offset", at::arange(20, at::kInt).narrow(0, 3, 10)},
      {"short", at::randint(-300, 300, {6}, at::kShort)},
      {"signed", at::randint(-100, 100, {4}, at::kChar)},
      {"bf16", at::randn({3}).to(at::kBFloat16)},  // safetensors only: NumPy has no bfloat16
  };
  for (const auto& [name, t] : tensors)
    if (t.scalar_type() != at::kBFloat16) kiln::data::write_npy(dir / ("k_" + name + ".npy"), t);
  kiln::safetensors::save_file(dir / "k.safetensors", tensors);

  std::ofstream(dir / "roundtrip.py") << R"(import glob, os, sys
import numpy as np
from safetensors.torch import load_file, save_file
d = sys.argv[1]
for f in glob.glob(os.path.join(d, "k_*.npy")):
    a = np.load(f)  # NumPy's own reader
    np.save(os.path.join(d, "p_" + os.path.basename(f)[2:]), a)  # and its writer
save_file(load_file(os.path.join(d, "k.safetensors")), os.path.join(d, "p.safetensors"))
)";
  const std::string cmd = *py + " " + (dir / "roundtrip.py") + " " + dir.path();
  REQUIRE(std::system(cmd.c_str()) == 0);

  const auto theirs = kiln::safetensors::load_file(dir / "p.safetensors").tensors;
  REQUIRE(theirs.size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    INFO(name << " " << t.scalar_type() << t.sizes());
    const auto it = std::find_if(theirs.begin(), theirs.end(), [&](const auto& p) { return p.first == name; });
    REQUIRE(it != theirs.end());
    REQUIRE(it->second.scalar_type() == t.scalar_type());
    REQUIRE(torch::equal(it->second, t));
    if (t.scalar_type() == at::kBFloat16) continue;
    const auto back = kiln::data::read_npy(dir / ("p_" + name + ".npy"));
    REQUIRE(back.scalar_type() == t.scalar_type());
    REQUIRE(back.sizes() == t.sizes());
    REQUIRE(torch::equal(back, t));
  }
}
