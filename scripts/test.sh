#!/usr/bin/env bash
# scripts/test.sh - the whole test suite, as CI runs it:
#   1. install missing Debian packages (build deps, chromium, clang);
#   2. build (build/) and run unit + integration tests (ctest);
#   3. run the browser test against a real atolld + workers;
#   3a. build the image and run the cluster in containers (tests/container/run.sh);
#   3b. fuzz the job compiler for a bounded time (tests/fuzz/run.sh); a crash fails;
#   4. build with ASan+UBSan (build-asan/) and run unit + integration again.
# Exits non-zero when any test fails. ATOLL_SKIP_ASAN=1 skips step 4.
set -euo pipefail
ATOLL_ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ATOLL_ROOT/scripts/deps.sh"
cd "$ATOLL_ROOT"

atoll_install $ATOLL_BUILD_DEPS chromium clang libclang-rt-14-dev python3

echo "== build"
atoll_build build
echo "== unit + integration tests"
ctest --test-dir build --output-on-failure -j2

echo "== browser tests (headless chromium)"
tests/browser/run.sh build

echo "== container test (podman + runc: image build, atolld + workers, compose, demo job)"
tests/container/run.sh

echo "== fuzzing the job compiler (libFuzzer, clang; ATOLL_FUZZ_SECONDS, default 60)"
cmake -S "$ATOLL_ROOT" -B build-fuzz -DCMAKE_C_COMPILER=clang -DATOLL_FUZZ=ON -DATOLL_TESTS=OFF \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz --target fuzz_job -j"$(nproc)"
tests/fuzz/run.sh build-fuzz "${ATOLL_FUZZ_SECONDS:-60}"

if [ "${ATOLL_SKIP_ASAN:-0}" != "1" ]; then
    echo "== ASan+UBSan build and tests"
    atoll_build build-asan -DATOLL_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest --test-dir build-asan --output-on-failure -j2
fi
echo "== all tests passed"
