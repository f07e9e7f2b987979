#!/usr/bin/env bash
# Every figure of docs/performance.md, in one go, on this machine: each benchmark
# prints its own ratios measured side by side in one run; this script runs them in
# turn and keeps what each printed (OUT/NAME.txt, and OUT/NAME.json where the
# benchmark writes one). Builds nothing (scripts/test builds the benchmarks).
#
#   benchmarks/performance.sh [OUT (perf-YYYYMMDD-HHMM)] [--quick]
#
# --quick: fewer rounds and steps (a smoke run of the script, not figures to quote).
# Steps, each a row group of docs/performance.md's table:
#   machine   nproc, CPU model and flags, transparent huge pages, load average
#   ops       kiln_bench_ops at 2^24 float32, 1 and 2 threads: ratio to ATen, GB/s and
#             the fraction of a STREAM copy in the same run
#   optim     kiln_bench_optim, 10M parameters: AdamW, Lion, SGD, Muon steps
#   heap      benchmarks/allocator_policy.sh 24: the ops under three heap policies (small
#             pages, a fresh mmap per large output, kiln's default)
#   train     kiln_bench_train fp32 and bf16 in the same rounds (bf16 only on a CPU with
#             bf16 instructions) at batch 128 and 32 against the Python twin, with the
#             step's floor (its GEMMs and optimizer alone) and the ceiling it puts on the
#             ratio
#   compile   kiln_bench_train --compile, fp32, 3 rounds: kiln against the twin under
#             torch.compile (inductor, C++ on the CPU) and the eager twin in the same rounds
#             (each round compiles afresh: about a minute a round on 2 cores)
#   default   the default run (configs/fashion_mlp.toml) with THP_MEM_ALLOC_ENABLE=1
#             (kiln's default) and =0, alternated: wall time and accuracy
#   precision benchmarks/precision_runs.sh: the default run in fp32 and bf16, seed by
#             seed (3 seeds; only on a CPU with bf16 instructions): each seed's accuracy
#             and samples/s in both, the mean accuracy difference and the speed ratio
#   gpt       benchmarks/twins/run.sh --models gpt --batches 32: the character GPT
#             (configs/gpt_char.toml, GEMM-bound) against its Python twin, in fp32 and
#             bf16 within each round (bf16 only on a CPU with bf16 instructions), and
#             bf16's speed-up over fp32 paired per round
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${KILN_BUILD_DIR:-$root/build}/bin"
out="" quick=0
for a in "$@"; do
  case "$a" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;  # the header comment
    -*) echo "performance.sh: unknown option $a (see --help)" >&2; exit 2 ;;
    *) out="$a" ;;
  esac
done
out="${out:-perf-$(date +%Y%m%d-%H%M)}"
for b in kiln kiln_bench_ops kiln_bench_optim kiln_bench_train; do
  [[ -x "$bin/$b" ]] || { echo "performance.sh: $bin/$b not built (scripts/test builds it)" >&2; exit 2; }
done
mkdir -p "$out"
if ((quick)); then
  ops_rounds=2 optim_rounds=2 train=(--steps 20 --warmup 10 --rounds 1 --rest 0) thp_rounds=2 default_rounds=1
  compile=(--steps 20 --warmup 10 --rounds 1 --rest 0)
  default_set=(--set train.epochs=1) precision=(1 fp32 bf16 -- --set train.epochs=1)
  gpt=(--rounds 1 --steps 6 --warmup 3)
else
  ops_rounds=11 optim_rounds=9 train=(--steps 200 --warmup 30 --rounds 7) thp_rounds=9 default_rounds=3
  compile=(--steps 200 --warmup 30 --rounds 3)
  default_set=() precision=(3 fp32 bf16)
  gpt=(--rounds 3 --steps 40 --warmup 10)
fi
run() {  # NAME COMMAND...: prints and keeps its output
  local name="$1"; shift
  echo "== $name: $*" | tee "$out/$name.txt"
  "$@" 2>&1 | tee -a "$out/$name.txt"
}

{
  echo "date: $(date -u +%FT%TZ); commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "cores: $(nproc); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o 'avx512[a-z_0-9]*\|amx[a-z_0-9]*\|avx2\|avx_vnni' | sort -u | tr '\n' ' ')"
  echo "transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo '?')"
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$out/machine.txt"

run ops "$bin/kiln_bench_ops" --sizes 24 --threads 1,2 --rounds "$ops_rounds" --json "$out/ops.json"
run optim "$bin/kiln_bench_optim" --threads 1,2 --rounds "$optim_rounds" --json "$out/optim.json"
run heap "$root/benchmarks/allocator_policy.sh" 24 "$thp_rounds"
# bf16 only where the CPU multiplies bf16 in hardware: elsewhere ATen emulates it and
# one round takes many minutes (docs/performance.md), which says nothing about kiln.
# Where it does, both precisions run in the same rounds and bf16's speed-up over fp32
# is paired per round.
bf16_hw=0
grep -m1 '^flags' /proc/cpuinfo | grep -qw 'avx512_bf16\|amx_bf16' && bf16_hw=1
if ((bf16_hw)); then
  run train "$bin/kiln_bench_train" --precision fp32,bf16 "${train[@]}" --json "$out/train.json"
else
  run train "$bin/kiln_bench_train" --precision fp32 "${train[@]}" --json "$out/train.json"
  echo "== train bf16: skipped, this CPU has no bf16 matrix instructions (avx512_bf16, amx_bf16)" \
    | tee -a "$out/train.txt"
fi

# The twin under torch.compile: fp32 only (bf16 compiled adds nothing kiln's figures
# need), fewer rounds than train's, since each round compiles the twin afresh.
run compile "$bin/kiln_bench_train" --precision fp32 --compile "${compile[@]}" --json "$out/compile.json"

# The default run, both policies alternated: the wall time kiln prints and its accuracy.
echo "== default: build/bin/kiln train (THP_MEM_ALLOC_ENABLE=1, kiln's default, and =0) x $default_rounds" \
  | tee "$out/default.txt"
for ((r = 0; r < default_rounds; r++)); do
  for thp in 1 0; do
    dir="$(mktemp -d)"
    t0="$(date +%s.%N)"
    THP_MEM_ALLOC_ENABLE=$thp "$bin/kiln" train --run-dir "$dir/run" --quiet "${default_set[@]}" >"$dir/out" 2>&1 \
      || { cat "$dir/out" >&2; exit 1; }
    wall="$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')"
    echo "THP_MEM_ALLOC_ENABLE=$thp round $r: wall ${wall} s; $(grep -o 'final test accuracy [0-9.]*%.* steps, [^;]*' "$dir/out" | head -1)" \
      | tee -a "$out/default.txt"
    rm -rf "$dir"
  done
done
if ((bf16_hw)); then
  run precision "$root/benchmarks/precision_runs.sh" "" "${precision[@]}"
  run gpt "$root/benchmarks/twins/run.sh" --models gpt --batches 32 --precision fp32,bf16 "${gpt[@]}" "$bin/kiln"
else
  run gpt "$root/benchmarks/twins/run.sh" --models gpt --batches 32 --precision fp32 "${gpt[@]}" "$bin/kiln"
fi
echo "figures in $out/"
