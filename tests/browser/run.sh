#!/usr/bin/env bash
# tests/browser/run.sh - the dashboard in a real headless browser against a
# real atolld and real workers.
#
# Usage: tests/browser/run.sh [BUILD_DIR] [--screenshots DIR]   (default: build)
#
# Starts BUILD_DIR/bin/atolld on a free loopback port (temp db, islands
# west=4x4 and the 3-D east=2x2x2), six atoll-worker processes of 4 devices
# covering both, installs playwright-core with npm into tests/browser/
# node_modules (once; the browser is Debian's /usr/bin/chromium, never a
# download) and runs dashboard.test.mjs, which drives the page: map, submit
# from the page, the job page live to success, pending reason, cancel, inline
# errors, utilization (see the file's header). With --screenshots DIR the
# same run also saves 1280x800 PNGs of the main views into DIR.
# Exits 0 on success, non-zero with a message on the first failure. Every
# process it starts is stopped on exit (trap).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BUILD="${1:-build}"
SHOTS=""
if [ "${2:-}" = "--screenshots" ]; then SHOTS="${3:?--screenshots needs a folder}"; fi
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
case "$SHOTS" in /*|"") ;; *) SHOTS="$ROOT/$SHOTS" ;; esac
ATOLLD="$BUILD/bin/atolld"
WORKER="$BUILD/bin/atoll-worker"
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/atoll-browser.XXXXXX")"
PIDS=()

fail() { echo "FAIL: $*" >&2; exit 1; }
note() { echo "-- $*" >&2; }

# Stops our own processes (by pid, workers first so they leave cleanly),
# escalating to SIGKILL after 5 s; shows their logs when the test failed.
cleanup() {
    local rc=$?
    local i pid
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        kill -TERM "${PIDS[i]}" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if [ "$rc" -ne 0 ]; then
        for f in "$TMP"/*.err; do
            [ -f "$f" ] || continue
            echo "---- last lines of $(basename "$f")" >&2
            tail -n 20 "$f" >&2
        done
        # Whole logs stay for a post-mortem (a CI run shows the path).
        echo "---- logs kept in $TMP" >&2
    else
        rm -rf "$TMP"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ -x "$ATOLLD" ] || fail "$ATOLLD not found or not executable (build first: cmake --build $BUILD)"
[ -x "$WORKER" ] || fail "$WORKER not found or not executable"
command -v curl >/dev/null || fail "curl is required"
if [ ! -x "$CHROMIUM" ]; then
    note "chromium missing: installing it with apt (may take a while)"
    { apt-get install -y chromium >"$TMP/apt.log" 2>&1 ||
      { apt-get update >>"$TMP/apt.log" 2>&1 && apt-get install -y chromium >>"$TMP/apt.log" 2>&1; }; } ||
        fail "could not install chromium (see apt output: run 'apt-get install -y chromium')"
    [ -x "$CHROMIUM" ] || fail "chromium still missing at $CHROMIUM"
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    note "node/npm missing: installing them with apt"
    { apt-get install -y nodejs npm >"$TMP/apt-node.log" 2>&1 ||
      { apt-get update >>"$TMP/apt-node.log" 2>&1 && apt-get install -y nodejs npm >>"$TMP/apt-node.log" 2>&1; }; } ||
        fail "could not install nodejs and npm (run 'apt-get install -y nodejs npm')"
fi
if [ ! -f "$HERE/node_modules/playwright-core/package.json" ]; then
    note "installing playwright-core with npm (no browser download)"
    (cd "$HERE" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --no-audit --no-fund \
        >"$TMP/npm.log" 2>&1) || { cat "$TMP/npm.log" >&2; fail "npm install failed in $HERE"; }
fi

# wait_for SECONDS CMD...: retries CMD every 0.2 s until it succeeds.
wait_for() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}

alive() { kill -0 "$1" 2>/dev/null; }

# ---------------------------------------------------------------- atolld
# ATOLL_WEB_DIR: serve this checkout's web/ (atolld's default is the source
# dir it was configured from, usually the same).
(cd "$ROOT" && ATOLL_WEB_DIR="$ROOT/web" exec "$ATOLLD" --listen 127.0.0.1:0 --db "$TMP/atoll.db" \
    --island west=4x4 --island east=2x2x2 --allow-run >"$TMP/atolld.out" 2>"$TMP/atolld.err") &
PIDS+=($!)
ATOLLD_PID=$!
url_ready() {
    alive "$ATOLLD_PID" || fail "atolld exited early"
    grep -qo 'http://127\.0\.0\.1:[0-9][0-9]*' "$TMP/atolld.out"
}
wait_for 20 url_ready || fail "atolld printed no ready line with http://127.0.0.1:PORT within 20 s"
URL="$(grep -o 'http://127\.0\.0\.1:[0-9][0-9]*' "$TMP/atolld.out" | head -n 1)"
note "atolld at $URL"

# ---------------------------------------------------------------- workers
# Users' programs (the run job of the page test) never run as root.
RUN_AS=()
if [ "$(id -u)" = 0 ]; then RUN_AS=(--run-as nobody); fi
n=0
for island in west west west west east east; do
    n=$((n + 1))
    "$WORKER" --controller "$URL" --island "$island" --devices 4 "${RUN_AS[@]}" \
        >"$TMP/worker$n.out" 2>"$TMP/worker$n.err" &
    PIDS+=($!)
    wpid=$!
    worker_ready() { alive "$wpid" || fail "worker $n exited early"; [ -s "$TMP/worker$n.out" ]; }
    wait_for 20 worker_ready || fail "worker $n printed no ready line within 20 s"
done
covered() {
    curl -fsS "$URL/v1/islands" 2>/dev/null | tr -d ' \n' | grep -q '"down":0.*"down":0'
}
wait_for 20 covered || fail "islands never fully covered: $(curl -sS "$URL/v1/islands" | head -c 400)"
note "west=4x4 and east=2x2x2 covered by 6 workers"

# ---------------------------------------------------------------- the browser
(cd "$HERE" && ATOLL_URL="$URL" CHROMIUM="$CHROMIUM" ATOLL_SCREENSHOTS="$SHOTS" \
    timeout 300 node dashboard.test.mjs) || fail "dashboard browser tests failed"
