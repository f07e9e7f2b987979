#!/usr/bin/env bash
# The kiln executable as a user meets it: help, a tiny run, a resume, and bad
# input (config, override, option, data, checkpoint) giving exit code 2 with a
# message that names the problem, without damaging what a run already wrote.
set -uo pipefail
kiln="$(realpath "$1")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0; checks=0

# expect CODE PATTERN -- ARGS...: run kiln, check the exit code and that the
# combined output matches PATTERN (extended regex).
expect() {
  local code="$1" pattern="$2"; shift 3
  checks=$((checks + 1))
  local out rc
  out="$("$kiln" "$@" 2>&1)"; rc=$?
  if [[ $rc -ne $code ]] || ! grep -Eq -- "$pattern" <<<"$out"; then
    failures=$((failures + 1))
    printf 'FAIL: kiln %s\n  expected exit %s and /%s/, got exit %s:\n%s\n' "$*" "$code" "$pattern" "$rc" "$out" | head -20
  fi
}

expect 0 "Commands:" -- --help
expect 2 "Usage: kiln" --
expect 2 "unknown command 'trian'; valid commands: train" -- trian
expect 0 "train\.epochs +passes over the training set \(default 10\)" -- train --help
expect 2 "Option .+bogus.+ does not exist" -- train --bogus

# The error line follows what the run printed on stdout where both go to one file
# (stdout's buffer had put it after the error).
checks=$((checks + 1))
"$kiln" train configs/tiny.toml --set data.train="$tmp/none.csv" --run-dir "$tmp/order" > "$tmp/order.out" 2>&1
if [[ "$(head -1 "$tmp/order.out")" != "kiln train: run directory $tmp/order" ||
      "$(tail -1 "$tmp/order.out")" != "kiln: error: $tmp/none.csv: no such file" ]]; then
  failures=$((failures + 1)); echo "FAIL: the error line is not the last line after stdout's:"; head -2 "$tmp/order.out"
fi

# An empty name (an unset shell variable) is refused, never read as "not given": an
# empty --resume started a new default run, an empty CONFIG read the default config.
expect 2 "^kiln: error: \-\-resume: expected a run directory, a checkpoint directory or 'latest', found an empty name$" -- train --resume ""
expect 2 "^kiln: error: CONFIG: expected a TOML config file, found an empty name$" -- train "" --dry-run
expect 2 "^kiln: error: \-\-run-dir: expected a directory for the run, found an empty name$" -- train configs/tiny.toml --run-dir ""
expect 2 "^kiln: error: CONFIG: expected a TOML config file, found an empty name$" -- summary ""
expect 2 "^kiln: error: CHECKPOINT: expected a checkpoint directory \(with manifest.json\) or a run directory \(with checkpoints/\), found an empty name$" -- sample ""
expect 2 "^kiln: error: RUN_DIR: expected a run directory \(with metrics.jsonl\), found an empty name$" -- report ""
# run.name "." or ".." would put the run into run.dir itself or above it, over the
# files there: refused before anything is written.
mkdir -p "$tmp/names/runs"
(cd "$tmp/names" && "$kiln" train "$OLDPWD/configs/tiny.toml" --set run.name=.. > out.txt 2>&1; echo $? > rc.txt)
checks=$((checks + 1))
if [[ "$(cat "$tmp/names/rc.txt")" != 2 ]] || ! grep -q 'run.name: expected a non-empty name without' "$tmp/names/out.txt" ||
   [[ -n "$(ls -A "$tmp/names/runs")" || -e "$tmp/names/config.toml" ]]; then
  failures=$((failures + 1)); echo "FAIL: run.name=.. was not refused before writing:"; cat "$tmp/names/out.txt"
fi

# A --run-dir holding a file the run would write (the user's own config.toml beside
# their data; `--run-dir .` in such a folder) is refused before anything is written,
# --dry-run too; other files are no obstacle; run.dir/run.name moves on to NAME-2.
mkdir -p "$tmp/mine" && printf 'mine = 1\n' > "$tmp/mine/config.toml"
(cd "$tmp/mine" && "$kiln" train "$OLDPWD/configs/tiny.toml" --run-dir . > ../mine.out 2>&1; echo $? > ../mine.rc)
checks=$((checks + 1))
if [[ "$(cat "$tmp/mine.rc")" != 2 || "$(cat "$tmp/mine/config.toml")" != "mine = 1" || "$(ls -A "$tmp/mine")" != config.toml ]] ||
   ! grep -q "^kiln: error: \.: --run-dir: expected a new directory, an empty one or a run of kiln's, found \./config.toml there, which the run would write over" "$tmp/mine.out"; then
  failures=$((failures + 1)); echo "FAIL: --run-dir . over the user's config.toml was not refused before writing:"; cat "$tmp/mine.out"
fi
expect 2 "^kiln: error: $tmp/mine: --run-dir: expected a new directory, .*found $tmp/mine/config.toml there" \
  -- train configs/tiny.toml --run-dir "$tmp/mine" --dry-run
mkdir -p "$tmp/notes" && echo mine > "$tmp/notes/notes.txt"
expect 0 "final test accuracy" -- train configs/tiny.toml --run-dir "$tmp/notes" --set train.max_steps=0
mkdir -p "$tmp/rd/x" && echo mine > "$tmp/rd/x/data.json"
expect 0 "run directory $tmp/rd/x-2" -- train configs/tiny.toml --set run.dir="$tmp/rd" --set run.name=x --set train.max_steps=0
checks=$((checks + 1))
[[ "$(cat "$tmp/rd/x/data.json")" == mine && "$(ls -A "$tmp/rd/x")" == data.json ]] \
  || { failures=$((failures + 1)); echo "FAIL: run.dir/run.name wrote into a directory holding the user's data.json"; }

# A name longer than the file system holds is the user's to fix (exit 2), not an I/O error.
long="$(printf 'a%.0s' {1..300})"
expect 2 "^kiln: error: \-\-run-dir .*: expected a path whose names are at most 255 bytes each, found one of 300 bytes" \
  -- train configs/tiny.toml --run-dir "$tmp/$long"
expect 2 "^kiln: error: \-\-resume .*: expected a path whose names are at most 255 bytes each, found one of 300 bytes" \
  -- train --resume "$tmp/$long"
# A run whose checkpoints/ became a file: refused before the resume sets anything aside.
"$kiln" train configs/tiny.toml --quiet --set train.max_steps=2 --run-dir "$tmp/ckfile" > /dev/null 2>&1
rm -rf "$tmp/ckfile/checkpoints" && echo mine > "$tmp/ckfile/checkpoints"
before="$(cd "$tmp/ckfile" && find . -type f | sort | xargs md5sum)"
expect 2 "^kiln: error: $tmp/ckfile/checkpoints: expected the run's checkpoint directory, found a file" \
  -- train --resume "$tmp/ckfile"
checks=$((checks + 1))
[[ "$(cd "$tmp/ckfile" && find . -type f | sort | xargs md5sum)" == "$before" ]] \
  || { failures=$((failures + 1)); echo "FAIL: the refused resume changed the run directory"; }

printf '[train]\nepoch = 3\n' > "$tmp/unknown.toml"
expect 2 "unknown.toml:2:9: unknown key 'epoch' in \[train\]; valid keys: epochs" -- train "$tmp/unknown.toml"
printf '[train]\nepochs = "ten"\n' > "$tmp/type.toml"
expect 2 "type.toml:2:10: \[train\] epochs: expected an integer, found string \"ten\"" -- train "$tmp/type.toml"
expect 2 "nope.toml: cannot read the config file" -- train "$tmp/nope.toml"
expect 2 "\-\-set train.epochs=x: \[train\] epochs: expected an integer" -- train configs/tiny.toml --set train.epochs=x
expect 2 "\-\-set: train.batch_size: expected an integer > 0, found -1" -- train configs/tiny.toml --set train.batch_size=-1
expect 2 "\-\-set: model.activation: expected one of: \"relu\", \"gelu\", \"sigmoid\", found \"tanh\"" -- train configs/tiny.toml --set model.activation=tanh
expect 2 "\-\-set: model.sigmoid_beta: expected a finite number > 0, found -1.0" -- train configs/tiny.toml --set model.sigmoid_beta=-1
expect 2 "\-\-set: model.depth_sampling: expected one of: \"fixed\", \"uniform\", found \"random\"" -- train configs/tiny.toml --set model.depth_sampling=random
if ! command -v nvidia-smi >/dev/null; then
  expect 2 "train.device: expected cpu \(no cuda device is visible\), found \"cuda\"" -- train configs/tiny.toml --set train.device=cuda
  expect 2 "train.device: expected cpu \(no cuda device is visible\), found \"cuda:1\"" -- train configs/tiny.toml --set train.device=cuda:1
else
  expect 2 "train.device: expected cuda:0.* visible\), found \"cuda:99\"" -- train configs/tiny.toml --set train.device=cuda:99
fi
expect 2 "train.device: expected cpu, cuda or cuda:N, found \"cuda:x\"" -- train configs/tiny.toml --set train.device=cuda:x
expect 2 "/nonexistent: data.root: expected a directory" -- train configs/tiny.toml --set data.root=/nonexistent --run-dir "$tmp/nodata"

# Warnings reach the console as well as train.log, in text and in JSON, and the summary
# line says the batch a step really takes.
expect 0 "kiln: warning: train.batch_size \(100000\) is more than the 2000 training examples an epoch" \
  -- train configs/tiny.toml --run-dir "$tmp/bigbatch" --set train.batch_size=100000 --set train.max_steps=1
expect 0 "1 batch of 2000 per epoch" -- train configs/tiny.toml --run-dir "$tmp/bigbatch2" \
  --set train.batch_size=100000 --set train.max_steps=1
expect 0 '\{"event":"warning","message":"schedule.warmup_steps \(1000\) is not below the run.s 32 steps' \
  -- train configs/tiny.toml --run-dir "$tmp/warmup" --log-format json --set schedule.name=cosine \
  --set schedule.warmup_steps=1000 --set train.max_steps=1
expect 0 "kiln: warning: schedule.warmup_steps" -- train configs/tiny.toml --run-dir "$tmp/warmup2" --quiet \
  --set schedule.name=cosine --set schedule.warmup_steps=1000 --set train.max_steps=1
# The constant schedule warms up too (it gets to 32/1000 of optim.lr); a warmup the run
# completes is no warning.
expect 0 "kiln: warning: schedule.warmup_steps \(1000\) is not below the run's 32 steps: .* \(at most 0.032 of it\)" \
  -- train configs/tiny.toml --run-dir "$tmp/warmup3" --set schedule.warmup_steps=1000 --set train.max_steps=1
checks=$((checks + 1))
if "$kiln" train configs/tiny.toml --run-dir "$tmp/warmup4" --set schedule.warmup_steps=32 \
     --set train.max_steps=1 2>&1 | grep -q "warning: schedule"; then
  failures=$((failures + 1)); echo "FAIL: a warmup of the run's 32 steps (constant schedule) warned"
fi

# A good tiny run, then the same directory again without --resume.
expect 0 "final test accuracy [0-9.]+%" -- train configs/tiny.toml --run-dir "$tmp/run" --set train.max_steps=0
for f in config.toml metrics.jsonl train.log checkpoints/step_000000032/model.safetensors; do
  checks=$((checks + 1))
  [[ -f "$tmp/run/$f" ]] || { failures=$((failures + 1)); echo "FAIL: run directory lacks $f"; }
done
checks=$((checks + 1))
grep -q '"split":"test"' "$tmp/run/metrics.jsonl" && grep -q '"accuracy"' "$tmp/run/metrics.jsonl" \
  || { failures=$((failures + 1)); echo "FAIL: metrics.jsonl has no test line with accuracy"; }
expect 2 "already holds a run; continue it with --resume" -- train configs/tiny.toml --run-dir "$tmp/run"
# kiln's main puts ATen's large CPU tensors on huge pages (util/heap.h), as ATen itself
# reports it (its allocator's alignment), unless the environment says otherwise.
checks=$((checks + 1))
grep -q "heap: freed memory kept for reuse .*; CPU tensors of 2 MiB or more on transparent huge pages (THP_MEM_ALLOC_ENABLE=1)" \
  "$tmp/run/train.log" || { failures=$((failures + 1)); echo "FAIL: train.log does not say large tensors are on huge pages"; }
# Blocks of 2 MiB or more come from kiln's own cache (util/block_cache.h).
checks=$((checks + 1))
grep -q "; CPU blocks of 2 MiB or more from kiln's block cache" "$tmp/run/train.log" \
  || { failures=$((failures + 1)); echo "FAIL: train.log does not say large blocks come from kiln's block cache"; }
THP_MEM_ALLOC_ENABLE=0 KILN_CPU_BLOCK_CACHE=off "$kiln" train configs/tiny.toml --run-dir "$tmp/thp0" --set train.max_steps=1 --quiet >/dev/null 2>&1
checks=$((checks + 1))
grep -q "CPU tensors on the system's default pages (THP_MEM_ALLOC_ENABLE=0)" "$tmp/thp0/train.log" \
  || { failures=$((failures + 1)); echo "FAIL: THP_MEM_ALLOC_ENABLE=0 was not kept"; }
checks=$((checks + 1))
! grep -q "block cache" "$tmp/thp0/train.log" \
  || { failures=$((failures + 1)); echo "FAIL: KILN_CPU_BLOCK_CACHE=off still installed the block cache"; }
# --heap-env: the environment that gives another process the policy (the twins').
checks=$((checks + 1))
heap_env="$("$kiln" --heap-env)"
[[ "$heap_env" == "MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1073741824 THP_MEM_ALLOC_ENABLE=1" ]] \
  || { failures=$((failures + 1)); echo "FAIL: kiln --heap-env printed '$heap_env'"; }
checks=$((checks + 1))
heap_env="$(MALLOC_MMAP_MAX_=4 THP_MEM_ALLOC_ENABLE=0 "$kiln" --heap-env)"
[[ "$heap_env" == "THP_MEM_ALLOC_ENABLE=0" ]] \
  || { failures=$((failures + 1)); echo "FAIL: with the user's MALLOC_MMAP_MAX_, kiln --heap-env printed '$heap_env'"; }

# Export from the run (its newest checkpoint, step 32) in each format; Python's own
# readers (the torch venv's, KILN_TEST_PYTHON, when there) give back the checkpoint's
# tensors and its data.json; bad input exits 2 naming it and writes nothing.
for f in safetensors npy torch; do
  expect 0 "exported [0-9]+ tensors of step 32 .* \($f" -- export "$tmp/run" --format $f --out "$tmp/export/model.$f"
done
if [[ -x "${KILN_TEST_PYTHON:-}" ]]; then
  checks=$((checks + 1))
  "$KILN_TEST_PYTHON" - "$tmp/export" "$tmp/run/checkpoints/step_000000032" <<'EOF' \
    || { failures=$((failures + 1)); echo "FAIL: Python's readers do not give back the exports"; }
import os, sys, zipfile
import numpy as np, torch
from safetensors import safe_open
from safetensors.torch import load_file
out, ckpt = sys.argv[1], sys.argv[2]
want = load_file(os.path.join(ckpt, "model.safetensors"))
pt = torch.load(os.path.join(out, "model.torch"), weights_only=True)
st = load_file(os.path.join(out, "model.safetensors"))
assert sorted(pt) == sorted(st) == sorted(want), (sorted(pt), sorted(want))
for k, v in want.items():
    assert torch.equal(pt[k], v) and torch.equal(st[k], v), k
    assert np.array_equal(np.load(os.path.join(out, "model.npy", k + ".npy")), v.float().numpy()), k
if os.path.exists(os.path.join(ckpt, "data.json")):
    data = open(os.path.join(ckpt, "data.json")).read()
    assert open(os.path.join(out, "model.npy", "data.json")).read() == data
    with safe_open(os.path.join(out, "model.safetensors"), "pt") as f:
        assert f.metadata()["kiln.data"] == data
    with zipfile.ZipFile(os.path.join(out, "model.torch")) as z:
        [name] = [n for n in z.namelist() if n.endswith("/kiln_data.json")]
        assert z.read(name).decode() == data
EOF
fi
expect 2 "none: CHECKPOINT: expected a checkpoint directory \(with manifest.json\) or a run directory" \
  -- export "$tmp/none" --format torch --out "$tmp/x.pt"
expect 2 "\-\-format: expected one of safetensors, npy, torch, found \"onnx\"" -- export "$tmp/run" --format onnx --out "$tmp/x.onnx"
expect 2 "model.torch: --out: already exists; give --force to replace it" \
  -- export "$tmp/run" --format torch --out "$tmp/export/model.torch"
expect 0 "exported" -- export "$tmp/run" --format torch --out "$tmp/export/model.torch" --force
expect 0 "kiln export CHECKPOINT \[--best\] \[--format FORMAT\] --out PATH" -- export --help
# Without --format, --out's extension names it: the same bytes as the explicit export.
expect 0 "exported [0-9]+ tensors of step 32 .* \(safetensors" -- export "$tmp/run" --out "$tmp/export/implied.safetensors"
expect 0 "exported [0-9]+ tensors of step 32 .* \(torch" -- export "$tmp/run" --out "$tmp/export/implied.pth"
checks=$((checks + 1))
cmp -s "$tmp/export/implied.safetensors" "$tmp/export/model.safetensors" \
  || { failures=$((failures + 1)); echo "FAIL: the export --out x.safetensors implies differs from --format safetensors"; }
expect 2 "\-\-format: expected one of safetensors, npy, torch, found none, and \-\-out .*/implied names none by its extension \(\.safetensors, \.pt or \.pth\)" \
  -- export "$tmp/run" --out "$tmp/export/implied"
checks=$((checks + 1))
[[ ! -e "$tmp/export/implied" ]] || { failures=$((failures + 1)); echo "FAIL: a refused export wrote its --out"; }
# A place the file system refuses (as root too): --out named, then the temporary name
# the export went through, exit 74.
for f in npy safetensors; do
  expect 74 "^kiln: error: /proc/kiln-export-$f: cannot write \(/proc/kiln-export-$f\.tmp-[0-9]+: cannot create" \
    -- export "$tmp/run" --format $f --out "/proc/kiln-export-$f"
done
# Without --run-dir, a second run of the same name goes beside the first.
expect 0 "run directory $tmp/runs/tiny\b" -- train configs/tiny.toml --set run.dir=$tmp/runs --set train.max_steps=2
expect 0 "run directory $tmp/runs/tiny-2\b" -- train configs/tiny.toml --set run.dir=$tmp/runs --set train.max_steps=2

# Resume to two epochs continues from step 32, at the learning rate --set gives (the
# optimizer's default, 0.001, when the run left it unset); the line lists what changed.
expect 0 "resumed at step 32 with optim.lr 0.001 → 0.002, train.epochs 1 → 2" \
  -- train --resume "$tmp/run" --set train.epochs=2 --set optim.lr=0.002
expect 0 "resumed at step 64, where the run had already finished its 2 epoch\(s\): nothing to train" \
  -- train --resume "$tmp/run"
expect 2 "give --set overrides instead of a CONFIG file" -- train configs/tiny.toml --resume "$tmp/run"
expect 2 "none: --resume: expected a checkpoint directory \(with manifest.json\), a run directory" -- train --resume "$tmp/none"

# A damaged checkpoint: refused with exit 2, and nothing in it is changed.
ckpt="$tmp/run/checkpoints/step_000000064"
head -c 100 "$ckpt/model.safetensors" > "$tmp/model.part" && cp "$tmp/model.part" "$ckpt/model.safetensors"
sum_before="$(cd "$tmp/run" && find . -type f -exec md5sum {} + | sort)"
expect 2 "model.safetensors: truncated or corrupted" -- train --resume "$tmp/run" --set train.epochs=3
expect 2 "model.safetensors: truncated or corrupted" -- export "$ckpt" --format torch --out "$tmp/bad.pt"
checks=$((checks + 1))
[[ -z "$(compgen -G "$tmp/bad.pt*")" ]] || { failures=$((failures + 1)); echo "FAIL: a refused export left a file"; }
sum_after="$(cd "$tmp/run" && find . -type f -exec md5sum {} + | sort)"
checks=$((checks + 1))
[[ "$(grep -v train.log <<<"$sum_after")" == "$(grep -v train.log <<<"$sum_before")" ]] \
  || { failures=$((failures + 1)); echo "FAIL: a refused resume changed the run directory"; }
# Resuming from an older checkpoint sets the newer one (here the damaged step 64) aside.
expect 0 "set aside 1 later checkpoint" -- train --resume "$tmp/run/checkpoints/step_000000032" --set train.epochs=2
checks=$((checks + 1))
[[ -f "$tmp/run/superseded/step_000000064/manifest.json" && -f "$tmp/run/metrics.superseded.jsonl" ]] \
  || { failures=$((failures + 1)); echo "FAIL: the later checkpoint and metrics were not set aside"; }

# A CONFIG that is not a regular file is an error, not the default config.
expect 2 "$tmp: expected a config file \(TOML\), found a directory" -- train "$tmp"
# Three runs started together claim three directories, one run each.
for i in 1 2 3; do
  "$kiln" train configs/tiny.toml --set run.dir="$tmp/conc" --set train.max_steps=2 \
    --set train.log_every=1 >"$tmp/conc$i.out" 2>&1 &
done
wait
for d in tiny tiny-2 tiny-3; do
  checks=$((checks + 1))
  [[ "$(grep -c '"split":"train"' "$tmp/conc/$d/metrics.jsonl" 2>/dev/null)" == 2 ]] \
    || { failures=$((failures + 1)); echo "FAIL: concurrent starts: $d does not hold exactly one run"; }
done
# A run that fails before it trains leaves its --run-dir usable.
expect 2 "data.root: expected a directory" -- train configs/tiny.toml --set data.root=/nonexistent --run-dir "$tmp/retry"
expect 0 "final test accuracy" -- train configs/tiny.toml --run-dir "$tmp/retry" --set train.max_steps=0
# So does one in a directory that was there before it (made by the user, holding
# their notes): what the failed start wrote goes, the notes stay, the retry trains.
mkdir -p "$tmp/made" && echo mine > "$tmp/made/notes.txt"
expect 2 "data.root: expected a directory" -- train configs/tiny.toml --set data.root=/nonexistent --run-dir "$tmp/made"
checks=$((checks + 1))
[[ "$(ls -A "$tmp/made")" == notes.txt ]] || { failures=$((failures + 1)); echo "FAIL: a failed start left $(ls -A "$tmp/made" | tr '\n' ' ')in a directory the user made"; }
expect 0 "final test accuracy" -- train configs/tiny.toml --run-dir "$tmp/made" --set train.max_steps=0


# Signals. wait_for_steps DIR N: wait (up to 60 s) until metrics.jsonl has N train lines.
wait_for_steps() {
  for _ in $(seq 1 600); do
    [[ $(grep -c '"split":"train"' "$1/metrics.jsonl" 2>/dev/null) -ge $2 ]] && return 0
    sleep 0.1
  done
  return 1
}
# check DESCRIPTION COMMAND...: one more check, failed when the command fails.
check() {
  local what="$1"; shift
  checks=$((checks + 1))
  "$@" || { failures=$((failures + 1)); echo "FAIL: $what"; }
}
# SIGINT: the step finishes, a checkpoint is written, exit 130, and the run resumes.
"$kiln" train configs/tiny.toml --run-dir "$tmp/sigint" --set train.epochs=100 >"$tmp/sigint.out" 2>&1 &
pid=$!
wait_for_steps "$tmp/sigint" 1
kill -INT $pid; wait $pid; rc=$?
check "SIGINT exits with 130 (got $rc)" test $rc -eq 130
check "SIGINT says how to continue" grep -q "stopped after [0-9]* steps (SIGINT).*--resume" "$tmp/sigint.out"
check "SIGINT writes a complete checkpoint" compgen -G "$tmp/sigint/checkpoints/step_*/manifest.json" >/dev/null
# One step more than it made (its checkpoint's step; it may be past the first epoch).
last_step() { local c; c="$(ls -d "$1"/checkpoints/step_* | tail -1)"; echo $((10#${c##*step_})); }
expect 0 "resumed at step [1-9]" -- train --resume "$tmp/sigint" --set train.max_steps=$(( $(last_step "$tmp/sigint") + 1 ))
# A second SIGTERM ends the process at once (143); the last complete checkpoint is intact.
"$kiln" train configs/tiny.toml --run-dir "$tmp/sigterm" --set train.epochs=100 \
  --set checkpoint.every=1 >"$tmp/sigterm.out" 2>&1 &
pid=$!
wait_for_steps "$tmp/sigterm" 2
kill -TERM $pid; kill -TERM $pid; wait $pid; rc=$?
check "a second SIGTERM exits with 143 (got $rc)" test $rc -eq 143
expect 0 "resumed at step [1-9]" -- train --resume "$tmp/sigterm" --set train.max_steps=$(( $(last_step "$tmp/sigterm") + 1 ))
# --resume latest: the most recent run under ./runs (run.dir's default).
expect 0 "run directory $tmp/lat/runs/tiny\b" -- train configs/tiny.toml --set run.dir="$tmp/lat/runs" --set train.max_steps=3
pushd "$tmp/lat" >/dev/null
expect 0 "resumed at step 3\b" -- train --resume latest --set train.max_steps=5
# Resumed again with the limit it stopped at: nothing to train, and no hint to resume again.
expect 0 "resumed at step 5, where the run had already reached train.max_steps = 5: nothing to train" \
  -- train --resume latest
checks=$((checks + 1))
if "$kiln" train --resume latest 2>&1 | grep -q "stopped after\|continue with"; then
  failures=$((failures + 1)); echo "FAIL: a resume that trained nothing said to resume again"
fi
popd >/dev/null
expect 2 "cannot be given with it" -- train --resume latest --run-dir "$tmp/x"

# Bad data: one message naming the file and the place, exit 2, and no run directory
# left behind (nothing of a run is written when its data is refused).
printf 'a,b,y\n1,2,p\n3,4\n5,6,q\n' > "$tmp/ragged.csv"
printf 'a,b,y\n1,2,p\n3,x,q\n5,6,q\n' > "$tmp/text.csv"
printf 'a,b,y\n' > "$tmp/header.csv"
: > "$tmp/empty.csv"
printf 'a,b,y\n1,2,p\n3,,q\n5,6,p\n7,8,q\n9,1,p\n' > "$tmp/missing.csv"
expect 2 "ragged.csv: line 3: expected 3 fields \(as the header has\), found 2" -- train configs/tiny.toml --set data.train="$tmp/ragged.csv" --set data.label=y --run-dir "$tmp/bad1"
expect 2 "text.csv: line 3, column 2 \(b\): expected a number \(the column holds numbers, as on line 2\), found 'x'" -- train configs/tiny.toml --set data.train="$tmp/text.csv" --set data.label=y --run-dir "$tmp/bad2"
expect 2 "header.csv: expected data rows after the header, found none" -- train configs/tiny.toml --set data.train="$tmp/header.csv" --set data.label=y --run-dir "$tmp/bad3"
expect 2 "empty.csv: expected a header row and data rows, found an empty file" -- train configs/tiny.toml --set data.train="$tmp/empty.csv" --set data.label=y --run-dir "$tmp/bad4"
expect 2 "text.csv: data.label: expected one of the columns \(a, b, y\), found 'label'" -- train configs/tiny.toml --set data.train="$tmp/text.csv" --set data.label=label --run-dir "$tmp/bad5"
expect 2 "missing.csv: line 3, column 2 \(b\): expected a value, found an empty field; set data.missing" -- train configs/tiny.toml --set data.train="$tmp/missing.csv" --set data.label=y --run-dir "$tmp/bad6"
expect 2 "data.missing: expected one of: \"error\", \"drop\", \"mean\", found \"skip\"" -- train configs/tiny.toml --set data.train="$tmp/missing.csv" --set data.missing=skip
# An .npy header (10 + 118 bytes: the dict padded with spaces to 64-byte alignment) whose data is missing.
printf '\x93NUMPY\x01\x00\x76\x00{"descr": "<f4", "fortran_order": False, "shape": (4, 2), }' > "$tmp/short.npy"
printf '%*s\n' 58 '' >> "$tmp/short.npy"
expect 2 "short.npy: .*shape \[4, 2\] of Float needs 32 data bytes, the file has 0" -- train configs/tiny.toml --set data.train="$tmp/short.npy" --set data.train_targets="$tmp/short.npy" --run-dir "$tmp/bad7"
for d in bad1 bad2 bad3 bad4 bad5 bad6 bad7; do
  checks=$((checks + 1))
  [[ ! -e "$tmp/$d" ]] || { failures=$((failures + 1)); echo "FAIL: a run refused for its data left $tmp/$d behind"; }
done
# A CSV run with missing values dropped trains and names its classes.
expect 0 "test accuracy by class:  p ([0-9.]+%|-)  q ([0-9.]+%|-)" -- train configs/tiny.toml --set data.train="$tmp/missing.csv" --set data.label=y --set data.missing=drop --set data.test_fraction=0.5 --run-dir "$tmp/csvok"
# Class names are a file's bytes: printed escaped, never as the terminal escape sequences they hold.
printf 'a,y\n' > "$tmp/esc.csv"
for i in $(seq 1 20); do printf '%d,\033[31mred\n%d,blue\n' "$i" "$((i + 50))" >> "$tmp/esc.csv"; done
expect 0 'test accuracy by class:  \\x1B\[31mred ([0-9.]+%|-)  blue|test accuracy by class:  blue ([0-9.]+%|-)  \\x1B\[31mred' \
  -- train configs/tiny.toml --set data.train="$tmp/esc.csv" --set data.label=y --set data.test_fraction=0.5 --run-dir "$tmp/esc"
checks=$((checks + 1))
"$kiln" train configs/tiny.toml --set data.train="$tmp/esc.csv" --set data.label=y --set data.test_fraction=0.5 \
  --run-dir "$tmp/esc2" 2>&1 | grep -q $'\033' && { failures=$((failures + 1)); echo "FAIL: a raw escape byte reached the console"; }

# kiln sample: a small GPT on a text the test writes, then text from its checkpoint.
mkdir -p "$tmp/corpus"
for i in $(seq 200); do printf 'the cat sat on the mat. '; done > "$tmp/corpus/a.txt"
expect 0 "final test [0-9.]+ bits per character, accuracy [0-9.]+%" -- train configs/tiny.toml --run-dir "$tmp/gpt" --set data.format=text \
  --set data.train="$tmp/corpus" --set data.block_size=16 --set data.stride=16 --set data.windows=random \
  --set model.name=gpt --set model.blocks=1 --set model.embed=16 --set model.heads=2 --set train.epochs=1
expect 0 "kiln: 20 tokens in .* key/value cache" -- sample "$tmp/gpt" --prompt "the " --tokens 20 --temperature 0
expect 0 "no cache" -- sample "$tmp/gpt" --prompt "the " --tokens 20 --no-cache
# No prompt: as after a new line, or, as here (a corpus without line ends), a space.
expect 0 "kiln: 6 tokens in" -- sample "$tmp/gpt" --tokens 6
expect 0 "kiln: 5 tokens in .*, the best test_[a-z_]+ \([0-9.e-]+\) of [0-9]+ checkpoints?\)" -- sample "$tmp/gpt" --best --prompt "the " --tokens 5
expect 0 "exported 4 tensors of step [0-9]+ \(.*, the best test_accuracy \([0-9.]+\) of [0-9]+ checkpoints?\)" \
  -- export "$tmp/run" --best --out "$tmp/best.safetensors"
# A byte vocabulary trains on any bytes (Latin-1 text here: not UTF-8), its run files
# valid JSON; a character vocabulary refuses the file with the ways out.
mkdir -p "$tmp/latin1"
for i in $(seq 200); do printf 'caf\xe9 cr\xe8me br\xfbl\xe9e. '; done > "$tmp/latin1/menu.txt"
byte_run=(train configs/tiny.toml --set data.format=text --set data.train="$tmp/latin1" --set data.block_size=16
          --set model.name=gpt --set model.blocks=1 --set model.embed=16 --set model.heads=2 --set train.max_steps=3)
expect 0 "stopped after 3 steps" -- "${byte_run[@]}" --run-dir "$tmp/bytes" --set data.vocabulary=byte
expect 0 "kiln: 8 tokens in" -- sample "$tmp/bytes" --prompt "caf" --tokens 8
expect 2 "menu.txt: invalid UTF-8 at byte 3 .*data.exclude = \[\"menu.txt\"\].*iconv -f latin1 -t utf-8.*data.vocabulary = \"byte\"" \
  -- "${byte_run[@]}" --run-dir "$tmp/chars"
# The text streams: a reader that stops (| head) stops the generation, exit 0; SIGINT
# stops it after the token being chosen, exit 130; either way the count on stderr is the
# text printed (the corpus is ASCII: a byte a token), and after SIGINT the line is ended.
checks=$((checks + 1))
{ "$kiln" sample "$tmp/gpt" --prompt "the " --tokens 1000000 2> "$tmp/closed.err"; echo $? > "$tmp/closed.rc"; } \
  | head -c 64 > "$tmp/closed.out"
if [[ "$(cat "$tmp/closed.rc")" != 0 || "$(wc -c < "$tmp/closed.out")" != 64 ]] \
   || ! grep -Eq "^kiln: [0-9]+ of 1000000 tokens in .*; stopped: standard output was closed\)$" "$tmp/closed.err"; then
  failures=$((failures + 1))
  echo "FAIL: kiln sample | head -c 64: exit $(cat "$tmp/closed.rc"), $(wc -c < "$tmp/closed.out") bytes, $(cat "$tmp/closed.err")"
fi
checks=$((checks + 1))
"$kiln" sample "$tmp/gpt" --prompt "the " --tokens 1000000 > "$tmp/int.out" 2> "$tmp/int.err" & pid=$!
for _ in $(seq 200); do (( $(wc -c < "$tmp/int.out") >= 200 )) && break; sleep 0.1; done
kill -INT "$pid"; wait "$pid"; rc=$?
made="$(sed -nE 's/^kiln: ([0-9]+) of 1000000 tokens in .*; stopped by SIGINT\)$/\1/p' "$tmp/int.err")"
if [[ $rc != 130 || -z "$made" || "$(wc -c < "$tmp/int.out")" != $((4 + made + 1)) || "$(tail -c 1 "$tmp/int.out" | od -An -c | tr -d ' ')" != '\n' ]]; then
  failures=$((failures + 1))
  echo "FAIL: kiln sample stopped by SIGINT: exit $rc, $(wc -c < "$tmp/int.out") bytes, $(cat "$tmp/int.err")"
fi
expect 2 "\-\-prompt: .*U\+0051" -- sample "$tmp/gpt" --prompt "Q"
expect 2 "\-\-temperature: expected a number >= 0" -- sample "$tmp/gpt" --temperature -1
expect 2 "\-\-tokens: expected >= 1, found 0" -- sample "$tmp/gpt" --tokens 0
expect 2 "model.name: expected a language model trained on text \(gpt\), found \"mlp\"" -- sample "$tmp/run"
expect 2 "CHECKPOINT: expected a checkpoint directory" -- sample "$tmp/nowhere"
expect 2 "model.embed: expected a multiple of model.heads \(6\), found 100" -- train configs/gpt_char.toml --set model.embed=100
expect 2 "model.name = \"gpt\": expected text" -- train configs/tiny.toml --set model.name=gpt --run-dir "$tmp/gpt_img"

# The profiler: a window of steps, its files, and a console free of Kineto's own messages.
checks=$((checks + 1))
out="$("$kiln" train configs/tiny.toml --run-dir "$tmp/prof" --set data.train_limit=640 --profile steps=3:4,top=5 2>"$tmp/prof.err")"
if [[ $? -ne 0 || -s "$tmp/prof.err" || ! -s "$tmp/prof/profile/trace.json" ]] || ! grep -q "Top operators by self CPU time" <<<"$out"; then
  failures=$((failures + 1)); echo "FAIL: --profile 3:4: exit, stderr or files wrong:"; cat "$tmp/prof.err" | head -5
fi
expect 2 "profile.steps: expected \"A:B\" \(steps A to B, 1 <= A <= B\) or \"\" \(off\), found \"5:3\"" -- train configs/tiny.toml --profile 5:3
expect 0 "profile.steps 40:41 lies after the run's 32 steps: nothing is profiled" -- train configs/tiny.toml --profile 40:41 --run-dir "$tmp/prof_late"
expect 2 "\-\-log-format: expected text or json, found \"xml\"" -- train configs/tiny.toml --log-format xml
# --quiet prints the result alone; --log-format=json one JSON object per line, the result last.
checks=$((checks + 1))
out="$("$kiln" train configs/tiny.toml --run-dir "$tmp/quiet" --set data.train_limit=640 --quiet 2>&1)"
if [[ $? -ne 0 || "$(wc -l <<<"$out")" -gt 2 ]] || ! grep -q "^final test accuracy" <<<"$out"; then
  failures=$((failures + 1)); printf 'FAIL: --quiet printed:\n%s\n' "$out" | head -8
fi
checks=$((checks + 1))
"$kiln" train configs/tiny.toml --run-dir "$tmp/json" --set data.train_limit=640 --log-format=json > "$tmp/json.out" 2>&1
if [[ $? -ne 0 ]] || ! python3 -c '
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
kinds = [e["event"] for e in events]
assert kinds[0] == "run" and kinds[1] == "start" and kinds[-1] == "result", kinds
assert "eval" in kinds and "progress" in kinds, kinds
result = events[-1]
assert result["finished"] and result["steps"] == 10 and 0 < result["metrics"]["accuracy"] <= 1, result
assert result["resume_changes"] == [], result
' "$tmp/json.out"; then
  failures=$((failures + 1)); echo "FAIL: --log-format=json:"; head -5 "$tmp/json.out"
fi
checks=$((checks + 1))
"$kiln" train --resume "$tmp/json" --set train.epochs=2 --log-format=json > "$tmp/json2.out" 2>&1
if [[ $? -ne 0 ]] || ! python3 -c '
import json, sys
result = [json.loads(line) for line in open(sys.argv[1])][-1]
assert result["resumed_from"] == 10 and result["resume_changes"] == ["train.epochs 1 → 2"], result
' "$tmp/json2.out"; then
  failures=$((failures + 1)); echo "FAIL: --log-format=json of a resume:"; tail -2 "$tmp/json2.out"
fi
# kiln summary: the config resolved as kiln train resolves it (--set values with commas
# too), the module table and the memory estimate; bad input as kiln train's, exit 2.
expect 0 "layers.0 +kiln::nn::Linear +\(64, 64\) +50,240" -- summary configs/tiny.toml
expect 0 "activations: one step \(forward, loss, backward, optimizer\) on the meta device at batch 64" -- summary configs/tiny.toml
expect 0 "layers.1 +kiln::nn::Linear +\(64, 16\) bf16" -- summary configs/tiny.toml --set 'model.hidden=[32,16]' --set train.precision=bf16
expect 0 "not on meta: bf16 autocast does not run on the meta device" -- summary configs/tiny.toml --set train.precision=bf16
expect 0 "kiln summary \[CONFIG\] \[--set section.key=value ...\]" -- summary --help
expect 2 "type.toml:2:10: \[train\] epochs: expected an integer, found string \"ten\"" -- summary "$tmp/type.toml"
expect 2 "\-\-set train.epochs=x: \[train\] epochs: expected an integer" -- summary configs/tiny.toml --set train.epochs=x
expect 2 "ragged.csv: line 3: expected 3 fields" -- summary configs/tiny.toml --set data.train="$tmp/ragged.csv" --set data.label=y
expect 2 "Option .+run-dir.+ does not exist" -- summary configs/tiny.toml --run-dir "$tmp/x"
# kiln train --dry-run: the summary and the run directory it would claim, and nothing
# written: no directory created, no run touched.
expect 0 "kiln train --dry-run: run directory $tmp/dry/runs/tiny \(nothing written\)" -- train configs/tiny.toml --set run.dir="$tmp/dry/runs" --dry-run
expect 0 "memory estimate: a training step at batch 64" -- train configs/tiny.toml --set run.dir="$tmp/dry/runs" --dry-run
check "--dry-run created no run directory" test ! -e "$tmp/dry"
runs_before="$(cd "$tmp" && find runs run -exec stat -c '%n %s %Y' {} + | sort)"
expect 0 "kiln train --dry-run: run directory $tmp/runs/tiny-3 \(nothing written\)" -- train configs/tiny.toml --set run.dir="$tmp/runs" --dry-run
expect 0 "kiln train --dry-run: would continue in $tmp/run from $tmp/run/checkpoints/step_000000064 \(nothing" -- train --resume "$tmp/run" --dry-run
expect 0 "would continue in $tmp/run from $tmp/run/checkpoints/step_000000064 with train.epochs 2 → 3 \(nothing written\)" \
  -- train --resume "$tmp/run" --dry-run --set train.epochs=3
expect 2 "already holds a run; continue it with --resume" -- train configs/tiny.toml --run-dir "$tmp/run" --dry-run
expect 0 "kiln train --dry-run: run directory $tmp/dry2 \(nothing written\)" -- train configs/tiny.toml --run-dir "$tmp/dry2" --dry-run
expect 2 "\-\-set train.epochs=x: \[train\] epochs: expected an integer" -- train configs/tiny.toml --run-dir "$tmp/dry3" --dry-run --set train.epochs=x
runs_after="$(cd "$tmp" && find runs run -exec stat -c '%n %s %Y' {} + | sort)"
check "--dry-run changed no run" test "$runs_before" == "$runs_after"
check "--dry-run created no --run-dir" test ! -e "$tmp/dry2" -a ! -e "$tmp/dry3" -a ! -e "$tmp/runs/tiny-3"

# kiln report: a run's page goes into it (report.html), several runs need -o, and bad
# input exits 2 naming the file and line; a last line cut short is skipped with a warning.
expect 0 "wrote $tmp/run/report.html \(1 run, [0-9]+ charts" -- report "$tmp/run"
expect 2 "\-o: expected the file to write the report of 2 runs to, found none" -- report "$tmp/run" "$tmp/retry"
expect 0 "wrote $tmp/both.html \(2 runs, [0-9]+ charts" -- report "$tmp/run" "$tmp/retry" -o "$tmp/both.html"
expect 2 "nope: expected a run directory \(with metrics.jsonl\), found nothing there" -- report "$tmp/nope"
expect 2 "runs: expected a run directory .*found a directory of runs \($tmp/runs/tiny, $tmp/runs/tiny-2\)" -- report "$tmp/runs"
expect 2 "unknown.toml: -o: already exists and is not a kiln report" -- report "$tmp/run" -o "$tmp/unknown.toml"
mkdir -p "$tmp/cut"
printf '{"split":"train","step":1,"loss":1}\n{"split":"train","st' > "$tmp/cut/metrics.jsonl"
expect 0 "warning: .*cut/metrics.jsonl:2: skipped the last line: it is cut short" -- report "$tmp/cut"
printf '{"split":"train","step":1,"loss":1}\n{"split":"train","st\n{"split":"train","step":2,"loss":1}\n' > "$tmp/cut/metrics.jsonl"
expect 2 "cut/metrics.jsonl:2: expected a JSON object, found '\{\"split\":\"train\",\"st'" -- report "$tmp/cut"
expect 0 "kiln report RUN_DIR \[RUN_DIR \.\.\.\] \[-o FILE\]" -- report --help
expect 2 "Option .+bogus.+ does not exist \(see kiln report --help\)" -- report --bogus

# A run stopped before its first checkpoint (here: its checkpoints removed, its marker
# naming a process that is gone) starts again from step 0 with --resume; its earlier
# lines are set aside. One whose process still runs is refused.
"$kiln" train configs/tiny.toml --run-dir "$tmp/early" --set data.train_limit=640 --quiet > /dev/null 2>&1
rm -rf "$tmp/early/checkpoints"
# With no checkpoint to hold it, even its optimizer may change (with one it is refused).
expect 0 "holds a run stopped before its first checkpoint: starting it again from step 0" \
  -- train --resume "$tmp/early" --set optim.name=sgd
checks=$((checks + 1))
[[ -d "$tmp/early/checkpoints" && -s "$tmp/early/metrics.superseded.jsonl" && -d "$tmp/early/superseded/tb" ]] \
  || { failures=$((failures + 1)); echo "FAIL: the restarted run lacks a checkpoint or its set-aside lines"; }
rm -rf "$tmp/early/checkpoints"
# A run is running while a process holds the lock on its marker (flock(2)); here this
# shell holds it, on descriptor 9, as a training kiln does.
echo "pid $$" > "$tmp/early/.kiln-run"
exec 9<"$tmp/early/.kiln-run"
flock -n 9
expect 2 "early: --resume: expected a stopped run, found one still running \(pid $$" -- train --resume "$tmp/early"
exec 9<&-
# A marker nobody holds is a stopped run, whatever pid it names (a pid is reused).
echo "pid $$" > "$tmp/early/.kiln-run"
expect 0 "holds a run stopped before its first checkpoint: starting it again from step 0" -- train --resume "$tmp/early"

# A run with checkpoints is refused too while it trains: by its directory, one of its
# checkpoints, or 'latest'; and nothing of it changes. Once the holder lets go, it resumes.
exec 9<"$tmp/early/.kiln-run"
flock -n 9
early_before="$(cd "$tmp/early" && find . -type f ! -name .kiln-run -exec md5sum {} + | sort)"
early_ckpt="$(ls -d "$tmp/early/checkpoints"/step_* | head -n 1)"
expect 2 "early: --resume: expected a stopped run, found one still running \(pid [0-9]+, holding .*early/.kiln-run\); wait for it to finish, or stop it first" \
  -- train --resume "$tmp/early" --set train.epochs=2
expect 2 "early: --resume: expected a stopped run, found one still running" -- train --resume "$early_ckpt" --set train.epochs=2
expect 2 "early: --resume: expected a stopped run, found one still running" -- train --resume "$tmp/early" --dry-run
mkdir -p "$tmp/latest/runs" && ln -s "$tmp/early" "$tmp/latest/runs/early"
cd "$tmp/latest" || exit 1
expect 2 "early: --resume: expected a stopped run, found one still running" -- train --resume latest --set train.epochs=2
cd - > /dev/null || exit 1
checks=$((checks + 1))
[[ "$early_before" == "$(cd "$tmp/early" && find . -type f ! -name .kiln-run -exec md5sum {} + | sort)" ]] \
  || { failures=$((failures + 1)); echo "FAIL: a refused --resume changed the running run's files"; }
exec 9<&-
expect 0 "resumed at step" -- train --resume "$tmp/early" --set train.epochs=2

# More threads than the machine has: a warning (the run goes on); past 1024, refused.
expect 0 "kiln: warning: train.threads = $(( $(getconf _NPROCESSORS_ONLN) + 1 )) is more than this machine's $(getconf _NPROCESSORS_ONLN) CPU threads" \
  -- train configs/tiny.toml --run-dir "$tmp/threads" --set train.threads=$(( $(getconf _NPROCESSORS_ONLN) + 1 )) --set train.max_steps=2

# A file's own bytes quoted in a message reach the terminal escaped: a non-UTF-8 byte
# and a terminal escape sequence in a safetensors header.
printf '\x0d\x00\x00\x00\x00\x00\x00\x00{"a\x80\x1b[31m":1}' > "$tmp/raw.safetensors"
expect 2 "last read: '\"a\\\\x80'" -- train configs/tiny.toml --set model.init_from="$tmp/raw.safetensors" --run-dir "$tmp/raw_run"
checks=$((checks + 1))
if "$kiln" train configs/tiny.toml --set model.init_from="$tmp/raw.safetensors" --run-dir "$tmp/raw_run" 2>&1 \
   | LC_ALL=C grep -q $'[\x80\x1b]'; then
  failures=$((failures + 1)); echo "FAIL: a message printed a file's raw bytes"
fi

echo "cli: $((checks - failures)) passed, $failures failed"
[[ $failures -eq 0 ]]
