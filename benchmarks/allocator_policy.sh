#!/usr/bin/env bash
# kiln's CPU ops against ATen at one size, twice: as kiln runs by default (its main sets
# THP_MEM_ALLOC_ENABLE=1, PyTorch's switch that puts every large allocation of the
# process, ATen's and kiln's, on huge pages: the kernel-against-kernel figure) and with
# THP_MEM_ALLOC_ENABLE=0 (ATen's outputs on the default pages, kiln's own large outputs
# still advised onto huge pages: the figure of kiln's ops inside a PyTorch program that
# did not turn the switch on). Prints both ratios side by side; docs/ops.md quotes it.
#
#   benchmarks/allocator_policy.sh [LOG2N (24)] [ROUNDS (15)]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bench="${KILN_BUILD_DIR:-$root/build}/bin/kiln_bench_ops"
size="${1:-24}" rounds="${2:-15}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
[[ -x "$bench" ]] || { echo "allocator_policy.sh: $bench not built (scripts/test builds it)" >&2; exit 2; }
THP_MEM_ALLOC_ENABLE=0 "$bench" --sizes "$size" --threads 1,2 --rounds "$rounds" --json "$tmp/default.json" >/dev/null
THP_MEM_ALLOC_ENABLE=1 "$bench" --sizes "$size" --threads 1,2 --rounds "$rounds" \
  --json "$tmp/thp.json" >/dev/null
python3 - "$tmp/default.json" "$tmp/thp.json" <<'EOF'
import json, sys
default, thp = (json.load(open(p)) for p in sys.argv[1:3])
key = lambda r: (r["op"], r["pass"], r["threads"])
thp_by = {key(r): r for r in thp}
print(f"2^{default[0]['size'].bit_length() - 1} float32: ratio = ATen ns / kiln ns (median; first-third quartile)")
print(f"{'op':14}{'pass':5}{'threads':>8}  {'ATen without THP':>22}  {'kernel vs kernel (THP both)':>28}")
for r in default:
    t = thp_by[key(r)]
    cell = lambda x: f"{x['ratio']:.2f} ({x['ratio_q1']:.2f}-{x['ratio_q3']:.2f})"
    print(f"{r['op']:14}{r['pass']:5}{r['threads']:>8}  {cell(r):>22}  {cell(t):>28}")
EOF
