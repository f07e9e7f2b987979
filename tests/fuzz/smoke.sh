#!/usr/bin/env bash
# The fuzz targets' CI smoke run (ctest "fuzz: …"): every target first replays its
# regression inputs (tests/fuzz/regressions/TARGET: crashers found before, each fixed),
# then fuzzes from its seed corpus for a bounded number of executions. New inputs go
# to a temporary folder; the corpus in the source tree is only read.
# Usage: smoke.sh FUZZ_BUILD_DIR RUNS
set -euo pipefail
shopt -s nullglob
build="$1"; runs="${2:-20000}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
# One place for the limits a finding is measured against (scripts/fuzz uses the same).
source "$here/options.sh"
failed=0
for bin in "$build"/fuzz_*; do
  target="${bin##*/fuzz_}"
  mkdir -p "$tmp/$target"
  regressions=("$here/regressions/$target"/*)
  if (( ${#regressions[@]} )); then
    if ! "$bin" "${kiln_fuzz_options[@]}" -artifact_prefix="$tmp/" "${regressions[@]}" \
         >"$tmp/$target.regress.log" 2>&1; then
      echo "FAIL $target: a regression input fails again"; tail -30 "$tmp/$target.regress.log"; failed=1
      continue
    fi
  fi
  start=$SECONDS
  if "$bin" "${kiln_fuzz_options[@]}" -runs="$runs" -artifact_prefix="$tmp/" \
       "$tmp/$target" "$here/corpus/$target" >"$tmp/$target.log" 2>&1; then
    echo "ok   $target: ${#regressions[@]} regression inputs, $(grep -o 'Done [0-9]* runs' "$tmp/$target.log") in $((SECONDS - start)) s"
  else
    echo "FAIL $target"; tail -40 "$tmp/$target.log"; failed=1
  fi
done
exit $failed
