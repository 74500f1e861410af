#!/usr/bin/env bash
# scripts/test.sh - the whole test suite, as CI runs it:
#   1. install missing Debian packages (build deps, chromium, clang), and
#      check that every mutant rule still names code that exists
#      (scripts/mutants.py --check: no build, a second);
#   2. build (build/) and run unit, integration and security tests and the
#      container test (image built and run with podman: tests/container/run.sh)
#      with ctest; a skipped test fails the run (a test that cannot run here
#      has proven nothing);
#   3. run the browser test against a real atolld + workers;
#   3b. fuzz the job compiler, the routing/auth layer, the worker's task
#       and data-plane decoders and atolld's report decoder, 2.1 M inputs
#       each (>= 10 M in all), capped at ATOLL_FUZZ_SECONDS (default 600)
#       (tests/fuzz/run.sh, targets in parallel); a crash fails;
#   4. build with ASan+UBSan (build-asan/) and run unit + integration again.
# Exits non-zero when any test fails. ATOLL_SKIP_ASAN=1 skips step 4.
set -euo pipefail
ATOLL_ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ATOLL_ROOT/scripts/deps.sh"
cd "$ATOLL_ROOT"

atoll_install $ATOLL_BUILD_DEPS chromium clang libclang-rt-14-dev python3 python3-yaml \
    python3-numpy python3-torch

echo "== mutant rules still apply (tests/mutants/rules.jsonl)"
python3 scripts/mutants.py --check

echo "== build"
atoll_build build
# Runs ctest with the given arguments; fails when a test failed or was
# skipped (ctest exits 0 on skips).
atoll_ctest() {
    local log
    log=$(mktemp)
    ctest "$@" 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    if grep -q '\*\*\*Skipped\|Not Run' "$log"; then
        echo "== a test was skipped or not run: failing (see above)" >&2
        rc=1
    fi
    rm -f "$log"
    return "$rc"
}

echo "== unit, integration, security and container tests"
atoll_ctest --test-dir build --output-on-failure -j2

echo "== browser tests (headless chromium)"
tests/browser/run.sh build

echo "== fuzzing the job compiler, routing/auth, task, frame, report and run-output decoders in parallel (libFuzzer, clang; 2.1 M inputs each, capped at ATOLL_FUZZ_SECONDS, default 600)"
cmake -S "$ATOLL_ROOT" -B build-fuzz -DCMAKE_C_COMPILER=clang -DATOLL_FUZZ=ON -DATOLL_TESTS=OFF \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz --target fuzz_all -j"$(nproc)"
tests/fuzz/run.sh build-fuzz "${ATOLL_FUZZ_SECONDS:-600}" "${ATOLL_FUZZ_RUNS:-2100000}"

if [ "${ATOLL_SKIP_ASAN:-0}" != "1" ]; then
    echo "== ASan+UBSan build and tests"
    atoll_build build-asan -DATOLL_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
    # tests/lsan.supp: leaks inside UCX's own error paths (see the file).
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        LSAN_OPTIONS="suppressions=$ATOLL_ROOT/tests/lsan.supp:print_suppressions=0" \
        atoll_ctest --test-dir build-asan --output-on-failure -j2 -LE container
fi
echo "== all tests passed"
