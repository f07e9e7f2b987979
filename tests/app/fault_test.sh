#!/usr/bin/env bash
# Faults a training run must survive, each checked against one uninterrupted run:
# kill -9 at random and at chosen instants (in a step, a checkpoint write,
# retention's deletion, before the first checkpoint), resumed each time to final
# weights equal bit for bit; a full disk; a read-only run directory; the run
# directory deleted under the run; a checkpoint file swapped while it is loaded;
# SIGTERM during a checkpoint write, SIGINT twice, SIGHUP from a terminal that goes
# away. File-system faults come from tests/fault/fault_inject.c (LD_PRELOAD), and from
# a real tmpfs and read-only bind mount where `unshare -m` is permitted.
#   fault_test.sh KILN [PYTHON [LIBFAULT_INJECT]]     (KILN_FAULT_SEED=N: another draw)
set -uo pipefail
kiln="$(realpath "$1")"
python="${2:-}"
[[ -x "$python" ]] || python="$(command -v python3)"
inject="$(realpath "${3:-$(dirname "$kiln")/../lib/libkiln_fault_inject.so}")"
# A sanitized kiln (scripts/sanitize) refuses to start unless AddressSanitizer's runtime
# comes first among the preloaded libraries.
asan_runtime="$(ldd "$kiln" 2>/dev/null | awk '/libasan/ {print $3}')"
[[ -n "$asan_runtime" ]] && inject="$asan_runtime:$inject"
tmp="$(mktemp -d)"
trap '[[ -n "${KILN_KEEP:-}" ]] || rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null' EXIT
failures=0; checks=0; not_run=()
started=$SECONDS
fail() { failures=$((failures + 1)); echo "FAIL: $*"; }
# check DESCRIPTION COMMAND...: one more check, failed when the command fails.
check() {
  local what="$1"; shift
  checks=$((checks + 1))
  "$@" || fail "$what"
}
# faulty RULES COMMAND...: COMMAND with the interposer and KILN_FAULTS=RULES (in the
# foreground: in the background, $! would be a subshell's).
faulty() { local rules="$1"; shift; KILN_FAULTS="$rules" LD_PRELOAD="$inject" "$@"; }
# wait_for PATH: until it exists (60 s at most).
wait_for() {
  for _ in $(seq 1 6000); do [[ -e "$1" ]] && return 0; sleep 0.01; done
  return 1
}

# The run every fault interrupts: a 784-256-10 MLP on 2,000 Fashion-MNIST images,
# batches of 256, a checkpoint every 2 steps, 2 kept (and the best), 40 steps.
cfg=(configs/tiny.toml --set 'model.hidden=[256]' --set train.batch_size=256 --set train.epochs=5
     --set checkpoint.every=2 --set checkpoint.keep_last=2 --set train.log_every=1 --set train.threads=1)
final=checkpoints/step_000000040

# newest DIR: the step of the run's newest complete checkpoint (a step_N with a manifest), or -1.
newest() {
  local n=-1 m
  for m in "$1"/checkpoints/step_*/manifest.json; do
    [[ -f "$m" ]] || continue
    m="${m%/manifest.json}"; m=$((10#${m##*step_}))
    ((m > n)) && n=$m
  done
  echo $n
}
# whole DIR: no step_N directory without its manifest (no partial checkpoint counted).
whole() {
  local d
  for d in "$1"/checkpoints/step_*; do [[ ! -e "$d" || -f "$d/manifest.json" ]] || return 1; done
}
# same_weights REF RUN: the final checkpoints' weights and optimizer state equal bit for bit.
same_weights() {
  cmp -s "$1/$final_ckpt/model.safetensors" "$2/$final_ckpt/model.safetensors" &&
    cmp -s "$1/$final_ckpt/optimizer.pt" "$2/$final_ckpt/optimizer.pt" && return 0
  [[ -f "$2/$final_ckpt/model.safetensors" ]] && "$python" - "$1/$final_ckpt" "$2/$final_ckpt" <<'EOF' 2>/dev/null
import sys
from safetensors.numpy import load_file
a, b = (load_file(d + "/model.safetensors") for d in sys.argv[1:])
print("  largest difference:", max(float(abs(a[k].astype("f8") - b[k]).max()) for k in a))
EOF
  return 1
}
# resume_to_end RUN WHAT [ARGS...]: --resume RUN (without faults) finishes from the newest
# complete checkpoint, with the uninterrupted run's final weights.
resume_to_end() {
  local run="$1" what="$2"; shift 2
  local want out rc
  want=$(newest "$run")
  out="$("$kiln" train --resume "$run" --quiet "$@" 2>&1)"; rc=$?
  checks=$((checks + 1))
  if [[ $rc -ne 0 ]]; then
    fail "$what: the resume exits $rc:"; echo "$out" | head -5; return
  elif ((want > 0)) && ! grep -q "resumed at step $want\b" <<<"$out"; then
    fail "$what: expected the resume from step $want (the newest complete checkpoint), got: $(head -1 <<<"$out")"; return
  fi
  check "$what: the resumed run ends with the uninterrupted run's weights, bit for bit" same_weights "$ref" "$run"
}
final_ckpt=$final
ref="$tmp/ref"
"$kiln" train "${cfg[@]}" --run-dir "$ref" --quiet >/dev/null 2>&1
check "the uninterrupted run" test -f "$ref/$final/manifest.json"
[[ -f "$ref/$final/manifest.json" ]] || { echo "faults: the uninterrupted run failed; nothing to compare with"; exit 1; }
# stopped RUN STEPS: a run of the config stopped after STEPS steps (train.max_steps), to
# resume with --set train.max_steps=0 (its config.toml keeps the limit).
stopped() { "$kiln" train "${cfg[@]}" --run-dir "$1" --set train.max_steps="$2" --quiet >/dev/null 2>&1; }

# ---------------------------------------------------------------------------------
# 1. kill -9, 26 times in one run of 160 steps: 6 kills at chosen instants (the
# interposer's kill rule: the process kills itself right after that operation),
# then 20 after random delays of 0.3-1.5 s from start (a seeded RNG). Each time,
# `kiln train --resume` goes on; every resume must load the newest complete
# checkpoint (or start again from step 0 when there is none), and the last one
# must end with the uninterrupted run's weights. Deletions are slowed by 2 ms per
# file so that random kills can land in them; each kill's phase is read from what
# the process had done (KILN_FAULT_TRACE).
long=("${cfg[@]}" --set train.epochs=20)
final_ckpt=checkpoints/step_000000160
ref_long="$tmp/ref_long"
KILN_FAULT_TRACE="$tmp/trace.ref" KILN_FAULT_TRACE_PATH="$ref_long" LD_PRELOAD="$inject" \
  "$kiln" train "${long[@]}" --run-dir "$ref_long" --quiet >/dev/null 2>&1
# Each random kill comes once the process has done a random number of file operations
# (its trace: creations, writes, fsyncs, renames, deletions), up to 4% of what the
# whole run does: 20 of them cover about 40% of the run, wherever in a step, a write
# or a deletion they land, on a fast machine or a slow one alike (a kill after a random
# time let a fast machine's run finish before 20 had landed).
kill_span_ops=$(( $(wc -l < "$tmp/trace.ref") * 4 / 100 ))
((kill_span_ops < 10)) && kill_span_ops=10
targeted=(
  "openw@/metrics.jsonl:kill"            # start-up done, before the first step
  "write@/optimizer.pt:kill"             # the first save: optimizer.pt written, not synced
  "fsync@/manifest.json:kill"            # the first save: its manifest on disk, not renamed
  "rename@/checkpoints/step_:kill"       # the first checkpoint renamed into place, its directory not synced
  "rename@/.trash-:kill"                 # retention: a checkpoint renamed to .trash-, not removed
  "unlink@/.trash-#3:kill"               # a .trash- directory half removed
)
RANDOM=${KILN_FAULT_SEED:-16}
kill_dir="$tmp/kill"
declare -A phases=()
kills=0 before_first=0 first_save=0 resumes_checked=0 finished_early=0
phase_of() {  # the phase a killed process was in, from its trace (none: killed while loading libraries)
  [[ -s "$1" ]] || { echo start-up; return; }
  awk 'BEGIN { s = "start-up" }
       $1 == "openw" && $2 ~ /\/metrics\.jsonl$/ { s = "step" }
       $1 == "mkdir" && $2 ~ /\/\.tmp-step_[0-9]+$/ { s = "write" }
       $1 == "unlink" && $2 ~ /\/\.tmp-step_/ { s = "write" }
       $1 == "rename" && $3 ~ /\/\.trash-[^\/]*$/ { s = "deletion"; next }
       $1 == "rename" && $3 ~ /\/step_[0-9]+$/ { s = "step" }
       $1 == "unlink" && $2 ~ /\/\.trash-[^\/]*\// { s = "deletion" }
       $1 == "unlink" && $2 ~ /\/\.trash-[^\/]*$/ { s = "step" }
       END { print s }' "$1"
}
for ((k = 1; k <= ${#targeted[@]} + 20; k++)); do
  want=$(newest "$kill_dir")
  log_from=$(stat -c %s "$kill_dir/train.log" 2>/dev/null || echo 0)
  if ((k <= ${#targeted[@]})); then rules="${targeted[k - 1]};unlink@/.trash-:delay=2000"
  else rules="unlink@/.trash-:delay=2000"; fi
  if ((k == 1)); then args=("${long[@]}" --run-dir "$kill_dir"); else args=(--resume "$kill_dir"); fi
  KILN_FAULT_TRACE="$tmp/trace.$k" KILN_FAULT_TRACE_PATH="$kill_dir" KILN_FAULTS="$rules" LD_PRELOAD="$inject" \
    "$kiln" train "${args[@]}" --quiet >"$tmp/kill.$k.out" 2>&1 &
  pid=$!
  if ((k > ${#targeted[@]})); then
    ops=$((1 + RANDOM % kill_span_ops))
    while kill -0 $pid 2>/dev/null && (( $( { wc -l < "$tmp/trace.$k"; } 2>/dev/null || echo 0) < ops )); do
      sleep 0.005
    done
    kill -9 $pid 2>/dev/null
  fi
  wait $pid 2>/dev/null; rc=$?  # (no "Killed" line from the shell)
  if [[ $rc -eq 0 ]]; then finished_early=$((finished_early + 1)); break; fi
  checks=$((checks + 1))
  [[ $rc -eq 137 ]] || { fail "kill $k: expected death by SIGKILL (137), got exit $rc:"; head -5 "$tmp/kill.$k.out"; break; }
  kills=$((kills + 1))
  phase=$(phase_of "$tmp/trace.$k")
  phases[$phase]=$((${phases[$phase]:-0} + 1))
  if ((want < 0)); then
    before_first=$((before_first + 1))
    [[ $phase == write ]] && first_save=$((first_save + 1))
  fi
  # What this attempt loaded, if it got that far: the newest complete checkpoint.
  loaded="$(tail -c +$((log_from + 1)) "$kill_dir/train.log" 2>/dev/null | grep -o 'resumed from .* at step [0-9]*' | grep -o '[0-9]*$')"
  if [[ -n "$loaded" ]]; then
    resumes_checked=$((resumes_checked + 1))
    check "kill $k: the resume loaded step $loaded, expected the newest complete checkpoint (step $want)" test "$loaded" -eq "$want"
  fi
  check "kill $k ($phase): no step_N directory without a manifest" whole "$kill_dir"
done
want=$(newest "$kill_dir")
out="$(faulty "unlink@/.trash-:delay=2000" "$kiln" train --resume "$kill_dir" --quiet 2>&1)"; rc=$?
checks=$((checks + 1))
if [[ $rc -ne 0 ]] || { ((want > 0)) && ! grep -q "resumed at step $want\b" <<<"$out"; }; then
  fail "the last resume after the kills: exit $rc, expected 'resumed at step $want':"; head -5 <<<"$out"
fi
check "26 kills: the last resume ends with the uninterrupted run's weights, bit for bit" same_weights "$ref_long" "$kill_dir"
check "26 kills: no leftover .tmp-/.trash- directory after the last save" \
  test -z "$(find "$kill_dir/checkpoints" -maxdepth 1 -name '.t*' -print -quit)"
check "26 kills: 20 or more landed before the run finished" test $kills -ge 20
echo "kill -9: $kills kills (${#targeted[@]} at chosen instants, the rest after random delays, seed ${KILN_FAULT_SEED:-16}):" \
     "${phases[start-up]:-0} during start-up or loading, ${phases[step]:-0} during a step (training, evaluation, logging)," \
     "${phases[write]:-0} during a checkpoint write, ${phases[deletion]:-0} during retention's deletion;" \
     "$before_first before the first checkpoint ($first_save of them during the first save);" \
     "$resumes_checked resumes logged the checkpoint they loaded, each the newest complete one;" \
     "final weights $( same_weights "$ref_long" "$kill_dir" >/dev/null && echo "bit-exact" || echo "DIFFERENT")"
final_ckpt=$final

# ---------------------------------------------------------------------------------
# 2. A full disk. The interposer's ENOSPC: a byte budget for the checkpoints' files that
# runs out in the third save; a manifest whose fsync fails (delayed allocation); a
# metrics line refused. Each: exit 74, a message naming the file and the reason and
# what is kept, no partial checkpoint left or counted, and the resume ends bit-exact.
# full_disk NAME RULES FILE_PATTERN: one such case.
full_disk() {
  local name="$1" rules="$2" pattern="$3" run="$tmp/$1" out rc
  out="$(faulty "$rules" "$kiln" train "${cfg[@]}" --run-dir "$run" --quiet 2>&1)"; rc=$?
  checks=$((checks + 1))
  if [[ $rc -ne 74 ]] || ! grep -Eq "^kiln: error: $run/$pattern: cannot [a-z ]+: No space left on device$" <<<"$out" \
     || ! grep -q "last complete checkpoint is $run/checkpoints/step_.*once there is space, continue with: kiln train --resume $run" <<<"$out" \
     || grep -qi "terminate\|backtrace\|Exception raised" <<<"$out"; then
    fail "full disk ($name): expected exit 74 naming $pattern and the last checkpoint, got exit $rc:"; head -5 <<<"$out"
  fi
  check "full disk ($name): no step_N directory without a manifest" whole "$run"
  check "full disk ($name): the failed save left no .tmp- directory" \
    test -z "$(find "$run/checkpoints" -maxdepth 1 -name '.tmp-*' -print -quit)"
  echo "full disk ($name): exit $rc, $(head -1 <<<"$out" | sed "s|$tmp/||g"); newest complete checkpoint: step $(newest "$run")"
  resume_to_end "$run" "full disk ($name)"
}
ckpt_bytes=$(du -sb "$ref/$final" | cut -f1)
full_disk budget "write@/checkpoints/:full=$((ckpt_bytes * 5 / 2))" 'checkpoints/\.tmp-step_000000006/[a-z._]+'
full_disk fsync "fsync@/manifest.json#1:fail=ENOSPC" 'checkpoints/\.tmp-step_000000004/manifest\.json'
full_disk metrics "write@/metrics.jsonl#4:fail=ENOSPC" 'metrics\.jsonl'

# ---------------------------------------------------------------------------------
# 3. A read-only run directory. Resumed while read-only (every change under it fails
# with EROFS): exit 74 naming the file, and not a byte of the run changed. Turned
# read-only at the instant of a checkpoint's rename: exit 74, the checkpoint before
# it intact. Both resume bit-exact once writable.
ro="$tmp/readonly"
stopped "$ro" 6
sums() { (cd "$1" && find . -type f -exec md5sum {} + | sort); }
before="$(sums "$ro")"
out="$(faulty "modify@$ro:fail=EROFS" "$kiln" train --resume "$ro" --quiet 2>&1)"; rc=$?
checks=$((checks + 1))
if [[ $rc -ne 74 ]] || ! grep -Eq "^kiln: error: $ro/[a-z._]+: cannot [a-z ]+: Read-only file system$" <<<"$out" \
   || ! grep -q "once the run directory is writable, continue with: kiln train --resume $ro" <<<"$out"; then
  fail "read-only run directory: expected exit 74 naming a file, got exit $rc:"; head -5 <<<"$out"
fi
check "read-only run directory: the refused resume changed nothing" test "$before" == "$(sums "$ro")"
echo "read-only run directory: exit $rc, $(head -1 <<<"$out" | sed "s|$tmp/||g")"
resume_to_end "$ro" "read-only run directory" --set train.max_steps=0
ro2="$tmp/readonly_install"
out="$(faulty "modify@$ro2/checkpoints/step_000000006:fail=EROFS" "$kiln" train "${cfg[@]}" --run-dir "$ro2" --quiet 2>&1)"; rc=$?
checks=$((checks + 1))
if [[ $rc -ne 74 ]] || ! grep -q "step_000000006.*: Read-only file system" <<<"$out"; then
  fail "read-only at a checkpoint's rename: expected exit 74, got exit $rc:"; head -5 <<<"$out"
fi
check "read-only at a checkpoint's rename: no step_N directory without a manifest" whole "$ro2"
echo "read-only at a checkpoint's rename: exit $rc, $(head -1 <<<"$out" | sed "s|$tmp/||g")"
resume_to_end "$ro2" "read-only at a checkpoint's rename"

# ---------------------------------------------------------------------------------
# 4. The run directory deleted under the running job (moved away, then removed, as
# `rm -rf` ends): the run notices within a step, saves its state into a new directory
# at the same path (config.toml and the checkpoint of that step) and stops with exit
# 74 saying so; --resume ends bit-exact.
gone="$tmp/gone"
"$kiln" train "${cfg[@]}" --run-dir "$gone" --quiet >"$tmp/gone.out" 2>&1 &
pid=$!
wait_for "$gone/checkpoints/step_000000004/manifest.json"
mv "$gone" "$tmp/gone.deleted"
for _ in $(seq 50); do rm -rf "$tmp/gone.deleted" 2>/dev/null && break; sleep 0.05; done
wait $pid; rc=$?
checks=$((checks + 1))
if [[ $rc -ne 74 ]] || ! grep -q "$gone: the run directory was deleted (or moved away) while the run trained: made it again with the run's config.toml and the state of step [0-9]*" "$tmp/gone.out"; then
  fail "run directory deleted: expected exit 74 saying so, got exit $rc:"; head -5 "$tmp/gone.out"
fi
check "run directory deleted: the new directory holds config.toml and a whole checkpoint" \
  test -f "$gone/config.toml" -a "$(newest "$gone")" -gt 4
echo "run directory deleted once step 4 was saved: exit $rc, saved step $(newest "$gone") into a new gone/"
resume_to_end "$gone" "run directory deleted"

# ---------------------------------------------------------------------------------
# 5. A checkpoint file replaced while it is loaded (TOCTOU). model.safetensors of the
# newest checkpoint is swapped for another step's (same tensors, other values) right
# after kiln first opens it: through a rename, kiln reads the bytes it checked and the
# run ends bit-exact (never the swapped-in weights); written into the same file, the
# bytes read differ from the manifest's CRC-32 and the resume is refused (exit 2).
toc="$tmp/toctou"
stopped "$toc" 6
stopped "$tmp/other" 2
evil="$tmp/other/checkpoints/step_000000002/model.safetensors"
cp -a "$toc" "$tmp/toctou_inplace"
target="$toc/checkpoints/step_000000006/model.safetensors"
out="$(faulty "openr@$target:swap=$evil" "$kiln" train --resume "$toc" --quiet --set checkpoint.keep_last=0 --set train.max_steps=0 2>&1)"; rc=$?
check "swapped while loaded (rename): the resume runs (exit $rc)" test $rc -eq 0
check "swapped while loaded (rename): the file was swapped" cmp -s "$target" "$evil"
check "swapped while loaded (rename): the swapped-in bytes were never loaded: final weights bit-exact" same_weights "$ref" "$toc"
target="$tmp/toctou_inplace/checkpoints/step_000000006/model.safetensors"
out="$(faulty "openr@$target:overwrite=$evil" "$kiln" train --resume "$tmp/toctou_inplace" --quiet 2>&1)"; rc=$?
checks=$((checks + 1))
if [[ $rc -ne 2 ]] || ! grep -q "model.safetensors: truncated or corrupted: CRC-32 [0-9]* differs from the manifest's" <<<"$out"; then
  fail "overwritten while loaded: expected exit 2 (CRC-32), got exit $rc:"; head -5 <<<"$out"
fi
echo "checkpoint swapped during its load: through a rename, loaded the checked bytes (bit-exact);" \
     "written in place, exit $rc: $(head -1 <<<"$out" | sed "s|$tmp/||g" | cut -c1-120)"

# ---------------------------------------------------------------------------------
# 6. Signals. The save of step 4 is slowed (its model.safetensors fsync waits 1 s) and
# the signal sent while its .tmp- directory exists. SIGTERM: the write finishes, exit
# 143 with that checkpoint. SIGINT twice: exit 130 at once, the .tmp- directory left
# and not counted, step 2 the newest. SIGHUP from a pty that closes: as SIGTERM, 129.
# SIGHUP ignored (nohup): the run ends normally.
slow="fsync@/.tmp-step_000000004/model.safetensors:delay=1000000"
sig="$tmp/sigterm"
KILN_FAULTS="$slow" LD_PRELOAD="$inject" "$kiln" train "${cfg[@]}" --run-dir "$sig" >"$tmp/sigterm.out" 2>&1 &
pid=$!
wait_for "$sig/checkpoints/.tmp-step_000000004"
kill -TERM $pid; wait $pid; rc=$?
check "SIGTERM during a checkpoint write: exit 143 (got $rc)" test $rc -eq 143
check "SIGTERM during a checkpoint write: that write completes (step 4 the newest)" test "$(newest "$sig")" -eq 4
check "SIGTERM during a checkpoint write: says how to continue" grep -q "stopped after 4 steps (SIGTERM).*--resume" "$tmp/sigterm.out"
check "SIGTERM during a checkpoint write: no .tmp- directory left" test ! -e "$sig/checkpoints/.tmp-step_000000004"
resume_to_end "$sig" "SIGTERM during a checkpoint write"
sig="$tmp/sigint2"
KILN_FAULTS="$slow" LD_PRELOAD="$inject" "$kiln" train "${cfg[@]}" --run-dir "$sig" >"$tmp/sigint2.out" 2>&1 &
pid=$!
wait_for "$sig/checkpoints/.tmp-step_000000004"
kill -INT $pid; sleep 0.1; kill -INT $pid; wait $pid; rc=$?
check "SIGINT twice during a checkpoint write: exit 130 (got $rc)" test $rc -eq 130
check "SIGINT twice: the cut write is a .tmp- directory, not counted (step 2 the newest)" \
  test -d "$sig/checkpoints/.tmp-step_000000004" -a "$(newest "$sig")" -eq 2
resume_to_end "$sig" "SIGINT twice"
check "SIGINT twice: the next save removed the .tmp- directory" test ! -e "$sig/checkpoints/.tmp-step_000000004"
echo "signals: SIGTERM during a write: exit 143, step 4 written; SIGINT twice: exit 130, step 2 kept, the cut write set aside"
sig="$tmp/sighup"
rc=$("$python" - "$sig/checkpoints/step_000000004/manifest.json" "$kiln" train "${cfg[@]}" --run-dir "$sig" <<'EOF'
# Runs kiln on a pseudo-terminal, as in a terminal window, and closes the window
# (the pty's master) once the checkpoint exists: the kernel hangs up the session.
import os, pty, select, sys, time
ready, argv = sys.argv[1], sys.argv[2:]
pid, fd = pty.fork()
if pid == 0:
    os.execv(argv[0], argv)
deadline = time.time() + 60
while not os.path.exists(ready) and time.time() < deadline:
    if select.select([fd], [], [], 0.01)[0]:
        try:
            os.read(fd, 1 << 16)
        except OSError:
            break
os.close(fd)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
EOF
)
hup_rc=$rc
check "SIGHUP (the terminal closed): exit 129 (got $rc)" test "$rc" == 129
stop_step="$(grep -o 'signal 1: stopping after step [0-9]*' "$sig/train.log" | grep -o '[0-9]*$')"
check "SIGHUP: the run wrote the checkpoint of the step it stopped after ($stop_step)" test "$(newest "$sig")" == "$stop_step"
resume_to_end "$sig" "SIGHUP"
sig="$tmp/nohup"
(trap '' HUP; exec "$kiln" train "${cfg[@]}" --run-dir "$sig" --quiet >"$tmp/nohup.out" 2>&1) &
pid=$!
wait_for "$sig/checkpoints/step_000000004/manifest.json"
kill -HUP $pid; wait $pid; rc=$?
check "SIGHUP under nohup (ignored): the run ends normally (exit $rc)" test $rc -eq 0
check "SIGHUP under nohup: the run trained to its end, bit-exact" same_weights "$ref" "$sig"
echo "signals: SIGHUP from a closed terminal: exit $hup_rc, stopped after step $stop_step with its checkpoint; under nohup: ignored, exit $rc"

# ---------------------------------------------------------------------------------
# 7. The real thing, where `unshare -m` may mount: a 6 MiB tmpfs that fills during the
# third save, and a read-only bind mount of a run directory before a resume, and of a
# run's checkpoints/ in the middle of the run.
if unshare -m --propagation private true 2>/dev/null; then
  mnt="$tmp/mnt"; mkdir -p "$mnt"
  stopped "$tmp/ro_real" 6
  KILN="$kiln" CFG="${cfg[*]}" REF="$ref" FINAL="$final" TMP="$tmp" unshare -m --propagation private bash -c '
    set -u
    kiln=$KILN; read -ra cfg <<<"$CFG"; run=$TMP/mnt/run
    mount -t tmpfs -o size=6m kiln-fault "$TMP/mnt" || exit 3
    "$kiln" train "${cfg[@]}" --run-dir "$run" --quiet > "$TMP/tmpfs.out" 2>&1; echo "rc $?" >> "$TMP/tmpfs.out"
    ls -a "$run/checkpoints" > "$TMP/tmpfs.ls"
    for d in "$run"/checkpoints/step_*; do [[ -f $d/manifest.json ]] || echo "partial $d" >> "$TMP/tmpfs.ls"; done
    mount -o remount,size=64m "$TMP/mnt"
    "$kiln" train --resume "$run" --quiet > "$TMP/tmpfs_resume.out" 2>&1; echo "rc $?" >> "$TMP/tmpfs_resume.out"
    cmp -s "$REF/$FINAL/model.safetensors" "$run/$FINAL/model.safetensors" &&
      cmp -s "$REF/$FINAL/optimizer.pt" "$run/$FINAL/optimizer.pt" && echo bit-exact >> "$TMP/tmpfs_resume.out"
    ro=$TMP/ro_real
    mount --bind "$ro" "$ro" && mount -o remount,bind,ro "$ro" || exit 4
    "$kiln" train --resume "$ro" --quiet > "$TMP/ro_real.out" 2>&1; echo "rc $?" >> "$TMP/ro_real.out"
    umount "$ro"
    mid=$TMP/ro_mid
    "$kiln" train "${cfg[@]}" --run-dir "$mid" --quiet > "$TMP/ro_mid.out" 2>&1 &
    pid=$!
    for _ in $(seq 6000); do [[ -e $mid/checkpoints/step_000000004/manifest.json ]] && break; sleep 0.01; done
    # Its checkpoints/ read-only (the kernel refuses while a file there is open for
    # writing, as during a save: then again a moment later).
    mount --bind "$mid/checkpoints" "$mid/checkpoints"
    for _ in $(seq 500); do mount -o remount,bind,ro "$mid/checkpoints" 2>/dev/null && break; sleep 0.01; done
    wait $pid; echo "rc $?" >> "$TMP/ro_mid.out"
    umount "$mid/checkpoints"
  '
  rc=$?
  check "tmpfs: the mounts worked (exit $rc)" test $rc -eq 0
  check "tmpfs full: exit 74 naming a file: No space left on device" \
    grep -Eq "^kiln: error: $tmp/mnt/run/[^ ]+: cannot [a-z ]+: No space left on device$" "$tmp/tmpfs.out"
  check "tmpfs full: exit 74" grep -q "^rc 74$" "$tmp/tmpfs.out"
  check "tmpfs full: no partial checkpoint" bash -c "! grep -q partial '$tmp/tmpfs.ls'"
  check "tmpfs full: resumed with space, bit-exact" grep -q "^bit-exact$" "$tmp/tmpfs_resume.out"
  echo "tmpfs of 6 MiB: $(grep "kiln: error" "$tmp/tmpfs.out" | sed "s|$tmp/||g"), $(grep -c step_ "$tmp/tmpfs.ls") whole checkpoint(s) kept;" \
       "resumed once there was space: $(grep -o 'resumed at step [0-9]*' "$tmp/tmpfs_resume.out"), $(grep -c bit-exact "$tmp/tmpfs_resume.out") bit-exact"
  check "read-only mount: exit 74, Read-only file system" \
    grep -Eq "^kiln: error: $tmp/ro_real/[^ ]+: cannot [a-z ]+: Read-only file system$" "$tmp/ro_real.out"
  check "read-only mount mid-run: exit 74" grep -q "^rc 74$" "$tmp/ro_mid.out"
  check "read-only mount mid-run: the message names the file and EROFS" \
    grep -Eq "^kiln: error: $tmp/ro_mid/.*: Read-only file system" "$tmp/ro_mid.out"
  check "read-only mount mid-run: no partial checkpoint" whole "$tmp/ro_mid"
  echo "read-only bind mount: $(grep "kiln: error" "$tmp/ro_real.out" | sed "s|$tmp/||g"); mid-run: $(grep "kiln: error" "$tmp/ro_mid.out" | sed "s|$tmp/||g")"
  resume_to_end "$tmp/ro_real" "read-only mount" --set train.max_steps=0
  resume_to_end "$tmp/ro_mid" "read-only mount mid-run"
else
  not_run+=("a real tmpfs and read-only bind mount (unshare -m is not permitted here; the interposer's cases ran)")
fi

echo "faults: $((checks - failures)) passed, $failures failed in $((SECONDS - started)) s"
for n in "${not_run[@]}"; do echo "faults: not run: $n"; done
[[ $failures -eq 0 ]]
