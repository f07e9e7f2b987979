#!/usr/bin/env bash
# The default MLP's matrix products through Debian's OpenBLAS and BLIS beside
# libtorch's MKL, same shapes, same threads (docs/performance.md, "The EPYC again:
# the step's floor, piece by piece"): whether another BLAS would lower the floor kiln's step stands on.
# Needs libopenblas-dev and/or libblis-dev (not kiln dependencies: a probe only).
#   benchmarks/blas/blas_shapes.sh [THREADS] [BATCHES]     e.g. 2 128,32
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
threads="${1:-2}"; batches="${2:-128,32}"
source "$here/../../scripts/versions.sh"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
lib=/usr/lib/x86_64-linux-gnu
declare -A built=()
if [[ -f "$lib/openblas-pthread/libopenblas.so" ]]; then
  gcc -O2 "$here/blas_shapes.c" -o "$work/openblas" -I/usr/include/x86_64-linux-gnu/openblas-pthread \
    -L"$lib/openblas-pthread" -lopenblas -Wl,-rpath,"$lib/openblas-pthread" && built[openblas]=1
fi
# BLIS ships no cblas.h of its own; the standard CBLAS prototypes (the system's
# cblas.h) declare what its libblis exports.
if [[ -f "$lib/blis-pthread/libblis.so.4" && -f /usr/include/x86_64-linux-gnu/cblas.h ]]; then
  gcc -O2 "$here/blas_shapes.c" -o "$work/blis" \
    "$lib/blis-pthread/libblis.so.4" -Wl,-rpath,"$lib/blis-pthread" -lpthread && built[blis]=1
fi
((${#built[@]})) || { echo "blas_shapes.sh: neither libopenblas-dev nor libblis-dev is installed" >&2; exit 2; }
IFS=, read -ra sizes <<< "$batches"
for round in 1 2; do
  for b in "${sizes[@]}"; do
    echo "round $round, $threads threads:"
    printf 'mkl      '; "$KILN_VENV/bin/python" - "$b" "$threads" <<'PY'
import sys, time, torch
b, t = int(sys.argv[1]), int(sys.argv[2]); torch.set_num_threads(t); reps = 200
w = [784, 512, 256, 10]
act = [torch.randn(b, k) for k in w]; gact = [torch.randn(b, k) for k in w]
wt = [torch.randn(w[i + 1], w[i]) for i in range(3)]; dw = [torch.empty(w[i + 1], w[i]) for i in range(3)]
fwd = [0.0] * 3; dwt = [0.0] * 3; dx = [0.0] * 3
for r in range(reps + 20):
    for i in range(3):
        t0 = time.perf_counter(); torch.mm(act[i], wt[i].t(), out=act[i + 1])
        if r >= 20: fwd[i] += time.perf_counter() - t0
    for i in (2, 1, 0):
        t0 = time.perf_counter(); torch.mm(gact[i + 1].t(), act[i], out=dw[i])
        if r >= 20: dwt[i] += time.perf_counter() - t0
        if i:
            t0 = time.perf_counter(); torch.mm(gact[i + 1], wt[i], out=gact[i])
            if r >= 20: dx[i] += time.perf_counter() - t0
cells = []
for i in range(3):
    cells += [f"fwd{i + 1} {fwd[i] / reps * 1e6:.0f}", f"dw{i + 1} {dwt[i] / reps * 1e6:.0f}"] + ([f"dx{i + 1} {dx[i] / reps * 1e6:.0f}"] if i else [])
print(f"batch {b} gemm   " + "  ".join(cells) + f"  sum {(sum(fwd) + sum(dwt) + sum(dx)) / reps * 1e6:.0f} µs")
PY
    if [[ -n "${built[openblas]:-}" ]]; then printf 'openblas '; OPENBLAS_NUM_THREADS=$threads "$work/openblas" "$b"; fi
    if [[ -n "${built[blis]:-}" ]]; then printf 'blis     '; BLIS_NUM_THREADS=$threads "$work/blis" "$b"; fi
  done
done
