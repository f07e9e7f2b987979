#!/usr/bin/env bash
# Whole runs of one config in two precisions, seed by seed: for each seed, a run in
# PRECISION_A and one in PRECISION_B, alternated (A first on odd seeds, B first on
# even ones, so a drift of the machine's speed falls on both sides alike). Prints,
# per seed, each run's final test accuracy (the test loss for a model without one,
# '-' for a run stopped before its evaluation) and median train samples/s (the
# metrics file's train events after the first epoch, or after the first log window
# in a shorter run), then the paired figures: B's accuracy minus A's (mean, standard
# deviation, range over the seeds) and B's samples/s over A's (median, range). One
# seed's accuracy moves by tenths of a point with the seed alone, so an accuracy goal
# is read on the mean of the pairs, not one run.
#
#   benchmarks/precision_runs.sh [CONFIG (the default run)] [SEEDS (3)] [A (fp32)] [B (bf16)] [-- EXTRA --set ARGS]
# Example: benchmarks/precision_runs.sh configs/fashion_mlp.toml 5
#          benchmarks/precision_runs.sh configs/gpt_char.toml 2 fp32 bf16 -- --set train.max_steps=150
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kiln="${KILN_BUILD_DIR:-$root/build}/bin/kiln"
usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" | sed '$d'; }
positional=()
while [[ $# -gt 0 && "$1" != "--" ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    *) positional+=("$1"); shift ;;
  esac
done
[[ "${1:-}" == "--" ]] && shift
extra=("$@")
config="${positional[0]:-}" seeds="${positional[1]:-3}" a="${positional[2]:-fp32}" b="${positional[3]:-bf16}"
fail() { echo "precision_runs.sh: $*" >&2; exit 2; }
[[ -x "$kiln" ]] || fail "$kiln not built (scripts/build builds it)"
[[ -z "$config" || -f "$config" ]] || fail "$config: no such config file"
[[ "$seeds" =~ ^[1-9][0-9]*$ ]] || fail "SEEDS: expected an integer >= 1, found '$seeds'"
for p in "$a" "$b"; do
  [[ "$p" =~ ^(fp32|bf16|fp16)$ ]] || fail "precision: expected fp32, bf16 or fp16, found '$p'"
done
[[ "$a" != "$b" ]] || fail "the two precisions are the same ('$a')"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

run() {  # seed precision
  local dir="$tmp/s$1-$2"
  "$kiln" train ${config:+"$config"} --quiet --set "train.seed=$1" --set "train.precision=\"$2\"" \
    --set "run.dir=\"$dir\"" --set "checkpoint.every=0" --set 'profile.steps=""' \
    --set "tensorboard.histogram_every=0" "${extra[@]}" >"$tmp/s$1-$2.log" 2>&1 \
    || { cat "$tmp/s$1-$2.log" >&2; fail "kiln train (seed $1, $2) failed"; }
}
for ((s = 1; s <= seeds; s++)); do
  if ((s % 2)); then run "$s" "$a"; run "$s" "$b"; else run "$s" "$b"; run "$s" "$a"; fi
done

python3 - "$tmp" "$seeds" "$a" "$b" <<'PY'
import glob, json, statistics as st, sys
tmp, seeds, a, b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def figures(seed, p):
    (path,) = glob.glob(f"{tmp}/s{seed}-{p}/*/metrics.jsonl")
    events = [json.loads(line) for line in open(path)]
    tests = [e for e in events if e.get("split") == "test"]
    train = [e for e in events if e.get("split") == "train" and "samples_per_s" in e]
    # After the first epoch, or after the first log window in a run shorter than one.
    later = [e for e in train if e.get("epoch", 1) > 1] or train[1:] or train
    if not later:
        sys.exit(f"precision_runs.sh: {path}: no train events with samples_per_s")
    # The final test figure: accuracy (%) for a classifier, else the test loss; none
    # when the run stopped mid-epoch (train.max_steps) without an evaluation.
    test = tests[-1] if tests else {}
    quality = 100 * test["accuracy"] if "accuracy" in test else test.get("loss")
    return quality, st.median(e["samples_per_s"] for e in later)
rows = [(s, figures(s, a), figures(s, b)) for s in range(1, seeds + 1)]
tests = [json.loads(l) for p in glob.glob(f"{tmp}/*/*/metrics.jsonl") for l in open(p) if '"split":"test"' in l]
accuracy = bool(tests) and all("accuracy" in e for e in tests)
what = "acc %" if accuracy else "test loss"
cell = lambda v: f"{v:.2f}" if accuracy and v is not None else f"{v:.4f}" if v is not None else "-"
print(f"{'seed':>4}  {a + ' ' + what:>14}  {b + ' ' + what:>14}  {'diff':>7}  {a + ' samples/s':>15}  {b + ' samples/s':>15}  {b + '/' + a:>9}")
for s, (q_a, sp_a), (q_b, sp_b) in rows:
    diff = f"{q_b - q_a:+.2f}" if accuracy and None not in (q_a, q_b) else f"{q_b - q_a:+.4f}" if None not in (q_a, q_b) else "-"
    print(f"{s:>4}  {cell(q_a):>14}  {cell(q_b):>14}  {diff:>7}  {sp_a:>15,.1f}  {sp_b:>15,.1f}  {sp_b / sp_a:>8.2f}x")
diffs = [rb[0] - ra[0] for _, ra, rb in rows if None not in (ra[0], rb[0])]
if diffs:
    sd = st.stdev(diffs) if len(diffs) > 1 else 0.0
    unit = " points" if accuracy else ""
    fmt = (lambda v: f"{v:+.2f}") if accuracy else (lambda v: f"{v:+.4f}")
    print(f"{'accuracy' if accuracy else 'test loss'} {b} - {a} over {len(diffs)} seeds: mean {fmt(st.mean(diffs))}{unit} "
          f"(sd {abs(sd):.{2 if accuracy else 4}f}, {fmt(min(diffs))} to {fmt(max(diffs))}); "
          f"{a} mean {cell(st.mean(r[1][0] for r in rows))}, {b} mean {cell(st.mean(r[2][0] for r in rows))}")
else:
    print("no final test figures (the runs stopped before an evaluation)")
speed = [rb[1] / ra[1] for _, ra, rb in rows]
print(f"samples/s {b} / {a}: median {st.median(speed):.2f}x ({min(speed):.2f}-{max(speed):.2f}x)")
PY
