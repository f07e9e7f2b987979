#!/usr/bin/env bash
# kiln::dist::Group across real processes on loopback: two ranks started by hand (their
# collectives, and gradients reduced by c10d's Reducer in one micro-batch or two against
# one process's full batch), the
# same under torchrun --no-python, a rank that dies (the survivor exits non-zero
# within the timeout, never hangs), and a store nobody hosts (exit 2, named).
#   dist_test.sh DIST_CHECK [TORCHRUN]
set -uo pipefail
check_bin="$(realpath "$1")"
torchrun="${2:-}"
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
   || [[ $(cat "$tmp"/pair_*.txt | grep -c "gradients within") -ne 4 ]]; then
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

echo "dist: $((checks - failures)) passed, $failures failed"
[[ $failures -eq 0 ]]
