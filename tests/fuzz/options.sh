# libFuzzer options every kiln fuzz run uses (sourced by smoke.sh and scripts/fuzz):
# a single allocation over 1 GiB or a process over 3 GiB is a finding (a file's header
# must not make kiln allocate what the file does not hold), as is an input taking
# over 10 s; inputs up to 64 KiB.
kiln_fuzz_options=(-malloc_limit_mb=1024 -rss_limit_mb=3072 -timeout=10 -max_len=65536
                   -print_final_stats=1)
# LeakSanitizer's suppressions for libtorch's own leaks (docs/reliability.md).
export LSAN_OPTIONS="suppressions=$(cd "$(dirname "${BASH_SOURCE[0]}")/../sanitize" && pwd)/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
