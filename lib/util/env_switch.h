// Process-wide switches read from the environment, each one word of a fixed set
// (KILN_STREAMING_STORES=auto|off|on, KILN_CPU_LINEAR=auto|blas|onednn).
#pragma once
#include <cstddef>
#include <initializer_list>

namespace kiln::util {

/// The index in `words` of environment variable `name`'s value: 0 (words' first, the
/// default) when it is unset or empty, and also, after a warning that names the
/// variable, the words and the value, when it is none of them.
/// Example: if (env_switch("KILN_CPU_LINEAR", {"auto", "blas", "onednn"}) == 1) …
std::size_t env_switch(const char* name, std::initializer_list<const char*> words);

}  // namespace kiln::util
