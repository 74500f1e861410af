#!/usr/bin/env bash
# bench/load.sh [BUILD_DIR] - the bounded load run: installs wrk (Debian) if
# missing, builds bench_load and runs it (LOAD_SECONDS, default 10; the whole
# run is capped at 90 s). Prints the figures; exits non-zero on any error.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
if ! command -v wrk >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "load.sh: installing wrk"
    { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
        $sudo apt-get install -y -qq --no-install-recommends wrk; } >/dev/null 2>&1 ||
        echo "load.sh: could not install wrk; the read endpoints will be skipped" >&2
fi
cmake -S "$root" -B "$build" >/dev/null
cmake --build "$build" --target bench_load atolld atoll-worker -j2 >/dev/null
timeout 90 "$build/bin/bench_load"
