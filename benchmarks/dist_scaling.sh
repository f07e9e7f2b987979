#!/usr/bin/env bash
# Data-parallel scaling on this machine: kiln_bench_dist in one process (batch B) and
# in two processes of 1 thread each (B each: weak scaling, and B/2 each: the same
# global batch), for the default MLP and a deeper one; prints each run's JSON line and
# the scaling efficiency (2-process samples/s over twice the 1-process samples/s), and
# for the mlp its taped step against the Reducer's.
#   benchmarks/dist_scaling.sh [BUILD_DIR]
set -euo pipefail
build="${1:-build}"
bench="$build/bin/kiln_bench_dist"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
two() {  # two processes by hand; rank 0's line
  local p; p=$(port)
  RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p "$bench" "$@" > /dev/null &
  RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p "$bench" "$@"
  wait
}
for model in mlp deep; do
  for b in 64 128; do
    one=$("$bench" --model $model --batch $b --threads 1)
    weak=$(two --model $model --batch $b --threads 1)
    strong=$(two --model $model --batch $((b / 2)) --threads 1)
    echo "$one"; echo "$weak"; echo "$strong"
    python3 - "$one" "$weak" "$strong" <<'PY'
import json, sys
one, weak, strong = (json.loads(a) for a in sys.argv[1:4])
f = lambda r: "%.0f samples/s" % r["samples_per_s"]
print("%s, batch %d: 1 process %s; 2 x %d: %s (efficiency %.2f, all-reduce %.2f ms overlapped / %.2f ms after backward); "
      "2 x %d (same global batch): %s (%.2fx one process)" % (
      one["model"], one["batch_per_process"], f(one), weak["batch_per_process"], f(weak),
      weak["samples_per_s"] / (2 * one["samples_per_s"]), weak["communication_ms_reducer"],
      weak["communication_ms_after_backward"], strong["batch_per_process"], f(strong),
      strong["samples_per_s"] / one["samples_per_s"]))
if "taped_ms" in weak:  # the mlp: its taped step, alone and with the taped reducer
    print("  taped step, 2 x %d: %.0f samples/s against the Reducer's %.0f (%.2fx; compute %.2f against %.2f ms, "
          "all-reduce %.2f ms)" % (weak["batch_per_process"], weak["taped_samples_per_s"], weak["samples_per_s"],
          weak["taped_samples_per_s"] / weak["samples_per_s"], weak["taped_compute_ms"], weak["compute_ms"],
          weak["communication_ms_taped"]))
PY
  done
done
