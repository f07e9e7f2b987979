#!/usr/bin/env bash
# kiln::dist::Group across real processes on loopback: two ranks started by hand (their
# collectives, and gradients reduced by c10d's Reducer, and by the taped step's
# reduction, in one micro-batch or two against one process's full batch), the
# same under torchrun --no-python, a rank that dies (the survivor exits non-zero
# within the timeout, never hangs), and a store nobody hosts (exit 2, named).
# Then kiln train itself in two processes: equal to one process with the same global
# batch, the taped step equal to autograd's bit for bit, through torchrun too, resumed bit for bit (and refused with another number of
# processes), stopped by SIGTERM to torchrun, and a rank killed mid-run.
#   dist_test.sh DIST_CHECK KILN [TORCHRUN [PYTHON]]
set -uo pipefail
check_bin="$(realpath "$1")"
kiln="$(realpath "$2")"
torchrun="${3:-}"
python="${4:-}"
tmp="$(mktemp -d)"
trap '[[ -n "${KILN_KEEP:-}" ]] || rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null' EXIT
failures=0; checks=0
fail() { failures=$((failures + 1)); echo "FAIL: $*"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# rank R of W on PORT: its output in $tmp/<label>_R.txt
start() {
  local label="$1" r="$2" w="$3" port="$4"; shift 4
  RANK=$r WORLD_SIZE=$w LOCAL_RANK=$r LOCAL_WORLD_SIZE=$w MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    timeout 120 "$check_bin" "$@" > "$tmp/${label}_$r.txt" 2>&1 &
}

# 1. Two ranks by hand.
checks=$((checks + 1))
port=$(free_port)
start pair 0 2 "$port" 20000; p0=$!
start pair 1 2 "$port" 20000; p1=$!
wait $p0; rc0=$?; wait $p1; rc1=$?
if [[ $rc0 -ne 0 || $rc1 -ne 0 ]] || ! grep -q "rank 0: ok (world 2" "$tmp/pair_0.txt" || ! grep -q "rank 1: ok" "$tmp/pair_1.txt" \
   || [[ $(cat "$tmp"/pair_*.txt | grep -c "gradients within") -ne 8 ]]; then
  fail "two ranks by hand: exits $rc0 $rc1"; cat "$tmp"/pair_*.txt | head -20
fi

# 2. The same through torchrun --no-python (its agent hosts the store).
if [[ -n "$torchrun" && -x "$torchrun" ]]; then
  checks=$((checks + 1))
  port=$(free_port)
  timeout 180 "$torchrun" --nproc-per-node=2 --master-addr=127.0.0.1 --master-port="$port" --no-python \
    "$check_bin" 20000 > "$tmp/torchrun.txt" 2>&1
  rc=$?
  if [[ $rc -ne 0 ]] || [[ $(grep -c "ok (world 2, local rank [01], torchrun's agent store)" "$tmp/torchrun.txt") -ne 2 ]]; then
    fail "torchrun --no-python: exit $rc"; tail -20 "$tmp/torchrun.txt"
  fi
else
  echo "KILN_TEST_SKIPPED: torchrun not found (scripts/setup installs it with the torch wheel); the torchrun check did not run"
fi

# 3. A rank that dies after the group is made: the other fails within its 5 s timeout.
checks=$((checks + 1))
port=$(free_port)
begin=$(date +%s)
start dies 0 2 "$port" 5000 --die-after-group; p0=$!
start dies 1 2 "$port" 5000 --die-after-group; p1=$!
wait $p0; rc0=$?; wait $p1; rc1=$?
took=$(( $(date +%s) - begin ))
if [[ $rc0 -eq 0 || $rc0 -eq 124 || $rc1 -ne 3 || $took -gt 60 ]]; then
  fail "a dead rank: survivor exit $rc0 after ${took}s (expected non-zero, not the 124 of a hang), dead rank exit $rc1"
  cat "$tmp"/dies_*.txt | head -20
fi

# 4. A store nobody hosts: rank 1 alone gives up within its 3 s timeout, exit 2, naming the address.
checks=$((checks + 1))
port=$(free_port)
start lonely 1 2 "$port" 3000; p1=$!
wait $p1; rc=$?
# One line: c10d's own retry messages and stack traces stay off stderr (StderrToLog).
if [[ $rc -ne 2 || $(wc -l < "$tmp/lonely_1.txt") -ne 1 ]] || ! grep -q "MASTER_ADDR:MASTER_PORT 127.0.0.1:$port: rank 1 could not reach the store" "$tmp/lonely_1.txt"; then
  fail "an unreachable store: exit $rc"; cat "$tmp/lonely_1.txt" | head -5
fi

# 5. A port in use: rank 0 cannot host the store there, exit 2.
checks=$((checks + 1))
python3 -c 'import socket,time,sys; s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(30)' > "$tmp/busy_port" &
busy=$!
for _ in $(seq 50); do [[ -s "$tmp/busy_port" ]] && break; sleep 0.1; done
port=$(cat "$tmp/busy_port")
start busy 0 2 "$port" 3000; p0=$!
wait $p0; rc=$?
kill $busy 2>/dev/null
if [[ $rc -ne 2 ]] || ! grep -q "rank 0 could not host the store there" "$tmp/busy_0.txt"; then
  fail "a port in use: exit $rc"; cat "$tmp/busy_0.txt" | head -5
fi

# 6. Bad environment: named, exit 2.
checks=$((checks + 1))
out="$(RANK=5 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 "$check_bin" 2>&1)"; rc=$?
[[ $rc -eq 2 ]] && grep -q "RANK: expected an integer in 0..1, found \"5\"" <<<"$out" || fail "RANK=5 of 2: exit $rc: $out"

# --- kiln train, data-parallel ------------------------------------------------------
cfg=configs/tiny.toml
common=(--set data.train_limit=640 --set train.epochs=2 --set train.threads=1 --set train.log_every=1
        --set checkpoint.every=10 --set checkpoint.keep_last=0 --set dist.timeout_s=20)
# ranks W PORT -- ARGS: kiln train in W processes; outputs in $tmp/train_<label>_R.txt
train_ranks() {
  local label="$1" w="$2" port="$3"; shift 4
  local pids=()
  for ((r = 0; r < w; r++)); do
    RANK=$r WORLD_SIZE=$w LOCAL_RANK=$r LOCAL_WORLD_SIZE=$w MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout 300 "$kiln" train "$@" > "$tmp/train_${label}_$r.txt" 2>&1 &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  return $rc
}
# max |a - b| over the newest checkpoints' tensors of two runs (the torch venv's safetensors)
weights_diff() {
  "$python" - "$1" "$2" <<'PY'
import glob, sys
import numpy as np
from safetensors.numpy import load_file
a, b = (load_file(sorted(glob.glob(d + "/checkpoints/step_*/model.safetensors"))[-1]) for d in sys.argv[1:3])
assert a.keys() == b.keys(), (a.keys(), b.keys())
print("%.3g" % max(float(np.abs(a[k].astype(np.float64) - b[k]).max()) for k in a))
PY
}
if [[ -n "$python" && -x "$python" ]] && "$python" -c "import numpy, safetensors" 2>/dev/null; then
  # 7. Two processes of 32 against one of 64: the same examples each step, the same weights.
  checks=$((checks + 1))
  "$kiln" train $cfg "${common[@]}" --set train.batch_size=64 --run-dir "$tmp/one" > "$tmp/one.txt" 2>&1 \
    || fail "one process: $(tail -3 "$tmp/one.txt")"
  train_ranks two 2 "$(free_port)" -- $cfg "${common[@]}" --set train.batch_size=32 --run-dir "$tmp/two" \
    || fail "two processes: $(tail -3 "$tmp"/train_two_*.txt)"
  diff=$(weights_diff "$tmp/one" "$tmp/two")
  echo "two processes against one after 20 steps: weights differ by at most $diff"
  "$python" -c "import sys; sys.exit(0 if float('$diff') <= 1e-6 else 1)" || fail "two processes against one: weights differ by $diff"
  # The evaluation, sharded across the two and its sums added, reports what one process's does.
  "$python" - "$tmp/one/metrics.jsonl" "$tmp/two/metrics.jsonl" <<'PY' || fail "two processes against one: the test lines differ"
import json, sys
one, two = ([json.loads(l) for l in open(p) if '"test"' in l] for p in sys.argv[1:3])
assert len(one) == len(two) == 2, (len(one), len(two))
for a, b in zip(one, two):
    assert a["accuracy"] == b["accuracy"] and abs(a["loss"] - b["loss"]) <= 1e-6 * a["loss"], (a, b)
PY
  grep -q "data-parallel: the 2 processes' parameters are identical at step 20" "$tmp/two/train.log" \
    || fail "two processes: no check that both ranks' parameters are identical in train.log"
  [[ -s "$tmp/train_two_1.txt" ]] && fail "rank 1 printed: $(head -3 "$tmp/train_two_1.txt")"
  [[ $(ls "$tmp" | grep -c "^two") -eq 1 ]] || fail "a run directory other than rank 0's appeared"

  # 7b. The same two processes through autograd and c10d's Reducer (KILN_TAPED_STEP=off):
  # the taped step's own bucketed all-reduce (GradientReducer's taped mode) gives the
  # same weights bit for bit.
  checks=$((checks + 1))
  export KILN_TAPED_STEP=off
  train_ranks autograd 2 "$(free_port)" -- $cfg "${common[@]}" --set train.batch_size=32 --run-dir "$tmp/two_autograd" \
    || fail "two processes through autograd: $(tail -3 "$tmp"/train_autograd_*.txt)"
  unset KILN_TAPED_STEP
  diff=$(weights_diff "$tmp/two" "$tmp/two_autograd")
  echo "two processes taped against through autograd after 20 steps: weights differ by at most $diff"
  [[ "$diff" == "0" ]] || fail "two processes taped against through autograd: weights differ by $diff"
  grep -q "gradient buckets (all-reduced by the taped step)" "$tmp/two/train.log" \
    || fail "two processes: train.log does not say the taped step all-reduced the gradients"
  grep -q "gradient buckets (c10d's Reducer)" "$tmp/two_autograd/train.log" \
    || fail "two processes with KILN_TAPED_STEP=off: train.log does not name c10d's Reducer"

  # 8. Stopped at step 10, resumed in two processes: bit for bit the straight run.
  checks=$((checks + 1))
  train_ranks halt 2 "$(free_port)" -- $cfg "${common[@]}" --set train.batch_size=32 --set train.max_steps=10 \
    --run-dir "$tmp/halted" || fail "two processes to step 10: $(tail -3 "$tmp"/train_halt_*.txt)"
  train_ranks resume 2 "$(free_port)" -- --resume "$tmp/halted" --set train.max_steps=0 \
    || fail "two processes resumed: $(tail -3 "$tmp"/train_resume_*.txt)"
  diff=$(weights_diff "$tmp/two" "$tmp/halted")
  [[ "$diff" == "0" ]] || fail "resumed in two processes: weights differ from the straight run by $diff"
  # …and in one process it is refused, naming how many it needs, the run untouched.
  checks=$((checks + 1))
  before=$(ls -R "$tmp/halted" | md5sum)
  out="$("$kiln" train --resume "$tmp/halted" --set train.epochs=3 2>&1)"; rc=$?
  [[ $rc -eq 2 ]] && grep -q "expected 2 processes (the checkpoint's run trained in 2, each with its share of every epoch), found 1: resume it with torchrun --nproc-per-node=2" <<<"$out" \
    || fail "a 2-process checkpoint resumed alone: exit $rc: $out"
  [[ "$(ls -R "$tmp/halted" | md5sum)" == "$before" ]] || fail "a refused resume changed the run directory"

  # 9. The same training through torchrun --no-python.
  if [[ -n "$torchrun" && -x "$torchrun" ]]; then
    checks=$((checks + 1))
    timeout 300 "$torchrun" --nproc-per-node=2 --master-addr=127.0.0.1 --master-port="$(free_port)" --no-python \
      "$kiln" train $cfg "${common[@]}" --set train.batch_size=32 --run-dir "$tmp/torchrun_run" > "$tmp/torchrun_train.txt" 2>&1 \
      || fail "kiln train under torchrun: $(tail -5 "$tmp/torchrun_train.txt")"
    diff=$(weights_diff "$tmp/two" "$tmp/torchrun_run")
    [[ "$diff" == "0" ]] || fail "kiln train under torchrun: weights differ from two processes by hand by $diff"

    # 10. SIGTERM to torchrun: it passes the signal on, every process stops after the same
    # step, rank 0 writes one checkpoint of it, and all exit within seconds.
    checks=$((checks + 1))
    "$torchrun" --nproc-per-node=2 --master-addr=127.0.0.1 --master-port="$(free_port)" --no-python \
      "$kiln" train $cfg --set data.train_limit=6400 --set train.epochs=50 --set train.threads=1 \
      --set train.batch_size=8 --run-dir "$tmp/term" > "$tmp/term.txt" 2>&1 &
    trun=$!
    for _ in $(seq 150); do grep -q '"step"' "$tmp/term/metrics.jsonl" 2>/dev/null && break; sleep 0.2; done
    begin=$(date +%s)
    kill -TERM "$trun"
    wait "$trun"
    took=$(( $(date +%s) - begin ))
    step=$(sed -n 's/.*signal 15: stopping after step \([0-9]*\).*/\1/p' "$tmp/term/train.log")
    ckpts=$(ls "$tmp/term/checkpoints" 2>/dev/null)
    if [[ -z "$step" || $took -gt 60 || "$ckpts" != "$(printf 'step_%09d' "$step")" ]] \
       || ! grep -q "stopped after $step steps (SIGTERM)" "$tmp/term.txt"; then
      fail "SIGTERM to torchrun: after ${took}s, stop step '$step', checkpoints '$ckpts'"; grep -v "^  " "$tmp/term.txt" | tail -5
    fi
  fi
else
  echo "KILN_TEST_SKIPPED: no torch venv python with numpy and safetensors; kiln train's data-parallel checks did not run"
fi

# 11. A rank killed mid-run: the survivor exits non-zero within dist.timeout_s, never hangs.
checks=$((checks + 1))
port=$(free_port)
begin=$(date +%s)
killed=(train $cfg --set data.train_limit=6400 --set train.epochs=50 --set train.threads=1 --set dist.timeout_s=10
        --set train.batch_size=8 --run-dir "$tmp/killed")
RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 120 "$kiln" "${killed[@]}" > "$tmp/killed_0.txt" 2>&1 &
k0=$!
RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$kiln" "${killed[@]}" > "$tmp/killed_1.txt" 2>&1 &
k1=$!  # kiln itself, so that kill -9 reaches it
for _ in $(seq 100); do grep -q '"step"' "$tmp/killed/metrics.jsonl" 2>/dev/null && break; sleep 0.2; done
kill -9 "$k1"
wait "$k1" 2>/dev/null
wait "$k0"; rc=$?
took=$(( $(date +%s) - begin ))
if [[ $rc -eq 0 || $rc -eq 124 || $took -gt 90 ]]; then
  fail "a killed rank: the survivor exited $rc after ${took}s"; tail -3 "$tmp/killed_0.txt"
fi
grep -q "kiln: error: data-parallel: rank 0 of 2 lost contact with rank 1 at step" "$tmp/killed_0.txt" || fail "a killed rank: the survivor said no error: $(tail -2 "$tmp/killed_0.txt")"

echo "dist: $((checks - failures)) passed, $failures failed"
[[ $failures -eq 0 ]]
