#!/usr/bin/env bash
# tests/fuzz/run.sh BUILD_DIR SECONDS - runs the job-compiler fuzzer built in
# BUILD_DIR (cmake -DATOLL_FUZZ=ON with CC=clang) for SECONDS on the seed
# corpus committed in tests/fuzz/corpus. New inputs it finds go to a scratch
# copy, never into the repo. Exits non-zero on a crash, leak or UB report
# (the reproducer is left in BUILD_DIR/fuzz-artifacts/).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: run.sh BUILD_DIR SECONDS}
secs=${2:-60}
bin="$build/bin/fuzz_job"
[ -x "$bin" ] || { echo "run.sh: $bin not built (cmake -DATOLL_FUZZ=ON, CC=clang)" >&2; exit 2; }
work="$build/fuzz-work"
art="$build/fuzz-artifacts"
rm -rf "$work"
mkdir -p "$work" "$art"
cp "$here"/corpus/* "$work"/
# -max_len: a job body is capped at 1 MiB by atolld; 64 KiB keeps runs fast
# while still allowing large documents. -timeout: one input over 10 s is a
# finding (the compiler must be fast on anything it is sent).
set +e
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
"$bin" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -dict="$here/job.dict" -print_final_stats=1 -artifact_prefix="$art/" "$work" 2>&1 | tail -n 25
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
    echo "fuzz_job: FAILED (exit $rc); reproducers in $art" >&2
    exit "$rc"
fi
echo "fuzz_job: no crash in ${secs}s"
