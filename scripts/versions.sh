# The one place where kiln's pinned versions live; sourced by the other scripts.
# torch 2.14.1 is the newest wheel whose default CUDA build is 13.0, the nvcc here.
# Another version can be tried without editing: KILN_TORCH_VERSION=2.11.0 scripts/build
KILN_TORCH_VERSION="${KILN_TORCH_VERSION:-2.14.1}"
KILN_HOME="${KILN_HOME:-$HOME/.local/share/kiln}"
KILN_VENV="${KILN_VENV:-$KILN_HOME/torch-$KILN_TORCH_VERSION}"
