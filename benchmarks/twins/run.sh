#!/usr/bin/env bash
# kiln's training step against an eager-PyTorch twin of the same model (issue 13,
# "Performance, measured side by side"): for each model and batch size, kiln trains its
# config (configs/fashion_convnet.toml, configs/gpt_char.toml) for WARMUP + STEPS steps
# and the twin (benchmarks/twins/<model>_twin.py, run with the torch wheel's own Python
# that scripts/setup installs: the same libtorch) runs the same steps, ROUNDS times,
# alternating kiln, Python, kiln, Python so that machine noise hits both. kiln's time is
# read from the samples_per_s of its metrics.jsonl "train" lines after the first
# (log_every = WARMUP, so the first window is the warm-up); the twin times its own
# steps after WARMUP untimed ones. Prints the median ms/step of each side and the ratio
# kiln steps/s ÷ Python steps/s (> 1: kiln is faster). Builds nothing; checks first that
# the twin's parameters and buffers have kiln's names and shapes (from the checkpoint
# the kiln run writes at its end).
#
#   benchmarks/twins/run.sh [--models convnet,gpt] [--steps N] [--warmup K]
#                           [--rounds R (3)] [--threads T (2)] [--precision fp32|bf16|fp32,bf16]
#                           [--batches B,B] [KILN (build/bin/kiln)]
# --precision overrides each config's train.precision on both sides (default: the
# config's own, fp32 where it sets none); fp32,bf16 runs both sides in both precisions
# within each round and adds bf16's speed-up over fp32 (steps/s), paired per round, for
# kiln and for the twin: the issue-17 figure for a GEMM-bound model (the GPT).
# Defaults: convnet 60 timed steps after 20, gpt 30 after 10; batch sizes convnet 128
# and 32, gpt 32 and 64 (--batches: these instead, for every model). STEPS is rounded up
# to a multiple of WARMUP (kiln's log window).
# Both sides run under kiln's heap policy (lib/util/heap.h, which kiln sets for itself
# and the twin gets from the environment here: freed memory kept by glibc, large
# tensors on huge pages); environment the caller sets (THP_MEM_ALLOC_ENABLE=0,
# MALLOC_*_, OMP_* …) reaches both sides alike.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
source "$root/scripts/versions.sh"
py="${KILN_PYTHON:-$KILN_VENV/bin/python}"
kiln="${KILN_BUILD_DIR:-$root/build}/bin/kiln"
models="convnet,gpt" steps="" warmup="" rounds=3 threads=2 precision="" batch_list=""
while (($#)); do
  case "$1" in
    --models) models="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --precision)
      [[ "$2" =~ ^(fp32|bf16)(,(fp32|bf16))?$ ]] \
        || { echo "run.sh: --precision: expected fp32, bf16 or fp32,bf16, found '$2'" >&2; exit 2; }
      precision="$2"; shift 2 ;;
    --batches)
      [[ "$2" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] \
        || { echo "run.sh: --batches: expected batch sizes such as 32,64, found '$2'" >&2; exit 2; }
      batch_list="${2//,/ }"; shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;  # the header comment
    -*) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) kiln="$1"; shift ;;
  esac
done
[[ -x "$kiln" ]] || { echo "run.sh: $kiln is not an executable (scripts/kiln builds it)" >&2; exit 2; }
[[ -x "$py" ]] || { echo "run.sh: $py not found (scripts/setup installs the torch venv)" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# kiln's own policy for the twin, as kiln itself reports it (lib/util/heap.h; what the
# caller set in the environment reaches both sides and kiln then keeps it).
read -ra twin_env <<<"$("$kiln" --heap-env)"

# model | config | batch sizes | default steps | default warm-up
declare -A config=([convnet]=fashion_convnet [gpt]=gpt_char)
declare -A batches=([convnet]="128 32" [gpt]="32 64")
declare -A default_steps=([convnet]=60 [gpt]=30) default_warmup=([convnet]=20 [gpt]=10)

# The kiln run's ms/step over the windows after the first: each "train" line covers
# log_every steps of batch_size examples at samples_per_s.
kiln_ms() {
  "$py" - "$1" "$2" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if '"split":"train"' in l.replace(" ", "")][1:]
if not lines: sys.exit("run.sh: kiln wrote no train line after the warm-up window")
print(1000.0 * sum(int(sys.argv[2]) / l["samples_per_s"] for l in lines) / len(lines))
PY
}

# The config's train.precision (fp32 when it sets none): the twin runs the same.
precision_of() {
  local p
  p="$(sed -n 's/^precision *= *"\([a-z0-9]*\)".*/\1/p' "$1" | head -1)"
  echo "${p:-fp32}"
}

# The twin's state dict against kiln's model.safetensors header: same names, same shapes.
check_shapes() {
  "$py" "$here/${1}_twin.py" --shapes >"$tmp/shapes.json"
  "$py" - "$2" "$tmp/shapes.json" <<'PY'
import json, math, struct, sys
with open(sys.argv[1], "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
header.pop("__metadata__", None)
kiln = {k: v["shape"] for k, v in header.items()}
twin = json.load(open(sys.argv[2]))
diff = sorted(k for k in kiln.keys() | twin.keys() if kiln.get(k) != twin.get(k))
if diff:
    sys.exit("run.sh: the twin differs from kiln's checkpoint in: " + ", ".join(
        f"{k} (kiln {kiln.get(k)}, twin {twin.get(k)})" for k in diff))
print(f"  same {len(kiln)} tensors as kiln's checkpoint, {sum(math.prod(s) for s in kiln.values())} elements")
PY
}

echo "kiln: $kiln"
echo "python: $py ($("$py" -c 'import torch; print("torch", torch.__version__)'))"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$tmp/results.jsonl"
for model in ${models//,/ }; do
  [[ -n "${config[$model]:-}" ]] || { echo "run.sh: unknown model '$model' (expected convnet, gpt)" >&2; exit 2; }
  k="${warmup:-${default_warmup[$model]}}"
  n="${steps:-${default_steps[$model]}}"
  n=$(((n + k - 1) / k * k))
  for b in ${batch_list:-${batches[$model]}}; do
    precs="${precision:-$(precision_of "$root/configs/${config[$model]}.toml")}"
    echo "$model, batch $b: $rounds rounds of $k warm-up + $n timed steps, $threads threads, $precs"
    for ((r = 0; r < rounds; r++)); do
     for prec in ${precs//,/ }; do
      dir="$tmp/$model-$b-$r-$prec"
      "$kiln" train "$root/configs/${config[$model]}.toml" --run-dir "$dir" \
        --set train.max_steps=$((k + n)) --set train.log_every="$k" --set train.threads="$threads" \
        --set train.batch_size="$b" --set train.eval_every=0 --set checkpoint.every=0 \
        --set train.precision="\"$prec\"" >"$dir.log" 2>&1 || { tail -20 "$dir.log" >&2; exit 1; }
      per_epoch="$(grep -o '[0-9]* batches of' "$dir.log" | head -1 | cut -d' ' -f1)"
      if ((k + n >= per_epoch)); then  # the epoch's evaluation would land in a timed window
        echo "run.sh: $((k + n)) steps reach the end of an epoch ($per_epoch batches of $b); use fewer" >&2
        exit 2
      fi
      if [[ ! -f "$tmp/$model.checked" ]]; then
        check_shapes "$model" "$(ls -d "$dir"/checkpoints/step_*/ | tail -1)model.safetensors"
        touch "$tmp/$model.checked"
      fi
      ms="$(kiln_ms "$dir/metrics.jsonl" "$b")"
      echo "{\"model\": \"$model\", \"batch\": $b, \"round\": $r, \"precision\": \"$prec\", \"side\": \"kiln\", \"ms_per_step\": $ms}" \
        >>"$tmp/results.jsonl"
      env "${twin_env[@]}" "$py" "$here/${model}_twin.py" --batch-size "$b" --steps "$n" --warmup "$k" --threads "$threads" \
        --precision "$prec" \
        | "$py" -c 'import json, sys; d = json.loads(sys.stdin.readlines()[-1]); d["side"] = "python"; d["batch"] = d["batch_size"]; d["round"] = int(sys.argv[1]); print(json.dumps(d))' "$r" \
        >>"$tmp/results.jsonl"
      tail -2 "$tmp/results.jsonl" | "$py" -c 'import json, sys
print("  round", sys.argv[1], sys.argv[2] + ":", ", ".join("%s %.1f ms/step" % (d["side"], d["ms_per_step"]) for d in map(json.loads, sys.stdin)))' "$r" "$prec"
      rm -rf "$dir"
     done
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$py" - "$tmp/results.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
tokens_per_step = {"gpt": 128}  # block_size positions per example
print(f"\n{'model':8}{'batch':>6}{'prec':>6}{'kiln ms/step':>14}{'python ms/step':>16}{'ratio':>7}{'kiln tok/s':>12}{'python tok/s':>14}")
for key in dict.fromkeys((r["model"], r["batch"], r["precision"]) for r in rows):
    ms = {side: statistics.median(r["ms_per_step"] for r in rows
                                  if (r["model"], r["batch"], r["precision"]) == key and r["side"] == side)
          for side in ("kiln", "python")}
    line = f"{key[0]:8}{key[1]:>6}{key[2]:>6}{ms['kiln']:>14.1f}{ms['python']:>16.1f}{ms['python'] / ms['kiln']:>7.2f}"
    if key[0] in tokens_per_step:
        t = key[1] * tokens_per_step[key[0]] * 1000.0
        line += f"{t / ms['kiln']:>12.0f}{t / ms['python']:>14.0f}"
    print(line)
print("ratio = kiln steps/s ÷ Python steps/s (median of the rounds on each side)")

# bf16's speed-up over fp32 (fp32 ms ÷ bf16 ms), paired within each round, per side.
def quartiles(v):
    q = statistics.quantiles(v, n=4, method="inclusive") if len(v) > 1 else [v[0]] * 3
    return f"{statistics.median(v):.2f}x ({q[0]:.2f}-{q[2]:.2f})"
ms_of = {(r["model"], r["batch"], r["round"], r["precision"], r["side"]): r["ms_per_step"] for r in rows}
for model, batch in dict.fromkeys((r["model"], r["batch"]) for r in rows):
    sides = {}
    for side in ("kiln", "python"):
        sides[side] = [ms_of[(model, batch, r, "fp32", side)] / ms_of[(model, batch, r, "bf16", side)]
                       for r in sorted({r["round"] for r in rows})
                       if (model, batch, r, "fp32", side) in ms_of and (model, batch, r, "bf16", side) in ms_of]
    if sides["kiln"]:
        print(f"{model} batch {batch} bf16÷fp32 steps/s, paired per round ({len(sides['kiln'])}): "
              f"kiln {quartiles(sides['kiln'])}, python {quartiles(sides['python'])}")
PY
