#!/usr/bin/env bash
# kiln's CPU ops against ATen at one size, under three heap policies, one run each:
#   small pages  THP_MEM_ALLOC_ENABLE=0: ATen's outputs on the default pages, kiln's own
#                large outputs still advised onto huge pages (kiln's ops inside a
#                PyTorch program that did not turn the switch on);
#   fresh mmap   huge pages for both sides, but glibc's mmap threshold at 32 MiB (kiln's
#                policy before M_MMAP_MAX 0): an output over 32 MiB is a fresh mmap
#                each call, its pages faulted in and zeroed by the kernel;
#   default      kiln's policy (lib/util/heap.h): huge pages, every block from the
#                heap, a freed one reused.
# Prints, per op, pass and thread count, the ratio ATen ns ÷ kiln ns (median,
# quartiles) and each side's fraction of a copy's bandwidth measured in the same run;
# docs/ops.md and docs/performance.md quote it.
#
#   benchmarks/allocator_policy.sh [LOG2N (24)] [ROUNDS (15)]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bench="${KILN_BUILD_DIR:-$root/build}/bin/kiln_bench_ops"
size="${1:-24}" rounds="${2:-15}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
[[ -x "$bench" ]] || { echo "allocator_policy.sh: $bench not built (scripts/test builds it)" >&2; exit 2; }
args=(--sizes "$size" --threads 1,2 --rounds "$rounds")
THP_MEM_ALLOC_ENABLE=0 "$bench" "${args[@]}" --json "$tmp/small.json" >/dev/null
THP_MEM_ALLOC_ENABLE=1 MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824 \
  "$bench" "${args[@]}" --json "$tmp/mmap.json" >/dev/null
"$bench" "${args[@]}" --json "$tmp/default.json" >/dev/null
python3 - "$tmp/small.json" "$tmp/mmap.json" "$tmp/default.json" <<'PY'
import json, sys
runs = [json.load(open(p)) for p in sys.argv[1:4]]
names = ["small pages", "fresh mmap", "default"]
key = lambda r: (r["op"], r["pass"], r["threads"])
by = [{key(r): r for r in run} for run in runs]
print(f"2^{runs[0][0]['size'].bit_length() - 1} float32: ATen ns / kiln ns (median, quartiles); "
      "[kiln, ATen] fraction of the copy's bandwidth")
print(f"{'op':14}{'pass':5}{'thr':>4}" + "".join(f"  {n:>29}" for n in names))
for r in runs[0]:
    cells = []
    for b in by:
        x = b[key(r)]
        bw = f" [{x['bandwidth_fraction']:.2f}, {x['ref_bandwidth_fraction']:.2f}]" if "bandwidth_fraction" in x else ""
        cells.append(f"{x['ratio']:.2f} ({x['ratio_q1']:.2f}-{x['ratio_q3']:.2f}){bw}")
    print(f"{r['op']:14}{r['pass']:5}{r['threads']:>4}" + "".join(f"  {c:>29}" for c in cells))
PY
