#!/usr/bin/env bash
# tests/fuzz/run.sh BUILD_DIR SECONDS - runs every libFuzzer target built in
# BUILD_DIR (cmake -DATOLL_FUZZ=ON with CC=clang) for SECONDS, all at once
# (so the total time is SECONDS, not SECONDS per target), each on its seed
# corpus committed in tests/fuzz/:
#   fuzz_job   the job parser and compiler      corpus/       job.dict
#   fuzz_http  atolld's routing and auth layer  corpus_http/  (none)
# New inputs they find go to scratch copies, never into the repo. Exits
# non-zero when any target reports a crash, leak, UB or timeout (the
# reproducers are left in BUILD_DIR/fuzz-artifacts/TARGET/).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: run.sh BUILD_DIR SECONDS}
secs=${2:-60}

# name  corpus-dir  extra libFuzzer flags
targets=(
    "fuzz_job corpus -dict=$here/job.dict -max_len=65536"
    "fuzz_http corpus_http -max_len=4096"
)

run_one() {
    local name=$1 corpus=$2
    shift 2
    local bin="$build/bin/$name" work="$build/fuzz-work/$name" art="$build/fuzz-artifacts/$name"
    [ -x "$bin" ] || { echo "run.sh: $bin not built (cmake -DATOLL_FUZZ=ON, CC=clang)" >&2; return 2; }
    rm -rf "$work"
    mkdir -p "$work" "$art"
    cp "$here/$corpus"/* "$work"/
    # -timeout: one input over 10 s is a finding (every target must be fast
    # on anything it is sent).
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$art/" "$@" "$work" >"$build/fuzz-$name.log" 2>&1
}

pids=()
for t in "${targets[@]}"; do
    # shellcheck disable=SC2086
    run_one $t &
    pids+=($!)
done
rc=0
for i in "${!targets[@]}"; do
    name=${targets[$i]%% *}
    if wait "${pids[$i]}"; then
        echo "$name: no crash in ${secs}s"
    else
        rc=1
        tail -n 25 "$build/fuzz-$name.log"
        echo "$name: FAILED; reproducers in $build/fuzz-artifacts/$name/" >&2
    fi
done
exit "$rc"
