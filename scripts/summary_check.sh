#!/usr/bin/env bash
# The figures of docs/observability.md, "kiln summary and --dry-run": how long
# `kiln summary` takes for every config in configs/, and, for each model's config,
# its memory estimate against a short real run's memory.jsonl (the activations the
# trainer measured, the process's peak resident memory). The estimate-against-a-real-
# step check itself is a test: `build/bin/kiln_tests "[summary]"` prints its figures.
# Usage: scripts/summary_check.sh [KILN] [STEPS]   (from the repository root; a config
# whose data is not there is reported and skipped)
set -uo pipefail
kiln="$(realpath "${1:-build/bin/kiln}")"
steps="${2:-20}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

echo "== kiln summary of each config ($(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg))"
for config in configs/*.toml; do
  start=$(date +%s.%N)
  out="$("$kiln" summary "$config" 2>&1)"; rc=$?
  seconds=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  if [[ $rc -ne 0 ]]; then
    printf '%-36s exit %d: %s\n' "$config" $rc "$(tail -1 <<<"$out")"
    continue
  fi
  printf '%-36s %6s s  total %-10s  %s\n' "$config" "$seconds" \
    "$(awk '$1 == "total" { print $2, $3 }' <<<"$out")" "$(grep -o 'summarised in .*' <<<"$out")"
done

echo "== estimate against a real run of $steps steps (memory.jsonl's last line)"
if [[ -x /usr/bin/time ]]; then  # what the process holds before any data or model: libtorch's libraries
  echo "kiln --version: peak RSS $(mib $(( $(/usr/bin/time -f %M "$kiln" --version 2>&1 >/dev/null) * 1024 )))"
fi
for config in configs/fashion_mlp.toml configs/deep_mlp_checkpointed.toml configs/dynamic_mlp.toml \
              configs/fashion_convnet.toml configs/gpt_char.toml; do
  name="$(basename "$config" .toml)"
  summary="$("$kiln" summary "$config" 2>&1)" || { echo "$config: $(tail -1 <<<"$summary")"; continue; }
  # max_steps stops mid-epoch: no evaluation, one checkpoint at the end.
  "$kiln" train "$config" --run-dir "$tmp/$name" --set train.max_steps="$steps" \
    --set memory.report_every=1 >/dev/null 2>&1 || { echo "$config: the run failed"; continue; }
  last="$(tail -1 "$tmp/$name/memory.jsonl")"
  field() { grep -o "\"$1\":[0-9]*" <<<"$last" | cut -d: -f2; }
  printf '%-36s estimate: activations %s, total %s, data %s | run: activations %s (the most of any step), peak RSS %s\n' \
    "$config" "$(awk '$1 == "activations" { print $2, $3 }' <<<"$summary")" \
    "$(awk '$1 == "total" { print $2, $3 }' <<<"$summary")" \
    "$(awk '$1 == "data" && $2 == "set" { print $3, $4 }' <<<"$summary")" \
    "$(mib "$(field activation_peak_bytes)")" "$(mib "$(field peak_rss_bytes)")"
done
