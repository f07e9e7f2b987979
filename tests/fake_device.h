// A test-only accelerator, "fake", on PyTorch's PrivateUse1 dispatch key: host memory
// behind a device of its own, so code that mixes CPU and device tensors fails on a
// CPU-only machine the way it would on CUDA (STYLE.md habit 15).
#pragma once
#include <c10/core/Device.h>

namespace kiln::test {

/// fake:0, the fake accelerator's only device. The first call registers the backend
/// (its name "fake", its allocator and its hooks); until then nothing in the process
/// sees it. Every op runs on the CPU kernels over the device's host memory, after a
/// check that all tensor arguments share a device (a 0-dim CPU tensor passes as a
/// scalar, CPU indices of index/index_put_ pass as on CUDA), with CUDA's message;
/// random ops draw from the CPU generator; autocast there follows CUDA's op lists.
/// Example: auto x = at::ones({2, 3}).to(kiln::test::fake_device());
c10::Device fake_device();

}  // namespace kiln::test
