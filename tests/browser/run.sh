#!/usr/bin/env bash
# tests/browser/run.sh - the dashboard in a real headless browser against a
# real atolld and real workers.
#
# Usage: tests/browser/run.sh [BUILD_DIR]      (default: build)
#
# Starts build/bin/atolld on a free loopback port (temp db, island west=2x4),
# two atoll-worker processes of 4 devices covering the island, submits a job
# holding a 2x2 slice for several seconds, and checks with Debian's headless
# chromium (--dump-dom) that the page at GET / shows exactly those 4 devices
# of west allocated to the job and the job row running/allocated; then waits
# for the job to succeed and checks the row says so and the devices are free.
# Exits 0 on success, non-zero with a message on the first failure. Every
# process it starts is stopped on exit (trap).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BUILD="${1:-build}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
ATOLLD="$BUILD/bin/atolld"
WORKER="$BUILD/bin/atoll-worker"
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
JOB_US=6000000            # how long the job holds its slice (compute op, µs)

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
    fi
    rm -rf "$TMP"
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
(cd "$ROOT" && ATOLL_WEB_DIR="$ROOT/web" exec "$ATOLLD" --listen 127.0.0.1:0 --db "$TMP/atoll.db" --island west=2x4 \
    >"$TMP/atolld.out" 2>"$TMP/atolld.err") &
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
for n in 1 2; do
    "$WORKER" --controller "$URL" --island west --devices 4 \
        >"$TMP/worker$n.out" 2>"$TMP/worker$n.err" &
    PIDS+=($!)
    wpid=$!
    worker_ready() { alive "$wpid" || fail "worker $n exited early"; [ -s "$TMP/worker$n.out" ]; }
    wait_for 20 worker_ready || fail "worker $n printed no ready line within 20 s"
done

island_ready() {
    curl -fsS "$URL/v1/islands/west" 2>/dev/null | tr -d ' \n' | grep -q '"free":8'
}
wait_for 20 island_ready || fail "island west never showed 8 free devices: $(curl -sS "$URL/v1/islands/west")"
note "island west covered by 2 workers"

# ---------------------------------------------------------------- the job
cat >"$TMP/job.json" <<EOF
{"name": "browser-test", "priority": 0,
 "slices": {"a": {"shape": [2, 2], "island": "west"}},
 "computations": [
   {"name": "hold", "slice": "a",
    "ops": [{"op": "shard_index", "out": "i"},
            {"op": "compute", "out": "c", "us": $JOB_US},
            {"op": "all_reduce", "out": "s", "args": ["i"], "reduce": "sum"}],
    "outputs": ["s"]}]}
EOF
code="$(curl -sS -o "$TMP/submit.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary @"$TMP/job.json" "$URL/v1/jobs")" || fail "POST /v1/jobs: curl failed"
[ "$code" = 201 ] || fail "POST /v1/jobs answered $code: $(cat "$TMP/submit.json")"
JOB="$({ tr -d ' \n' <"$TMP/submit.json" | grep -o '"id":[0-9][0-9]*' || true; } | head -n 1 | cut -d: -f2)"
[ -n "$JOB" ] || fail "no job id in $(cat "$TMP/submit.json")"
note "job $JOB submitted"

# The job object's own "state" is its first one (Jansson keeps key order).
job_state() {
    { curl -fsS "$URL/v1/jobs/$JOB" | tr -d ' \n' | grep -o '"state":"[a-z]*"' || true; } |
        head -n 1 | cut -d'"' -f4
}
job_in() { local s; s="$(job_state)" || return 1; [[ " $* " == *" $s "* ]]; }
wait_for 30 job_in allocated running succeeded || fail "job $JOB never got its slice (state: $(job_state))"
job_in allocated running || fail "job $JOB finished before the page could be checked (state: $(job_state))"

# ---------------------------------------------------------------- the page
# dump_dom FILE: the page after the browser ran its scripts for 5 s of
# virtual time; newlines flattened so one tag is one grep match. Chromium
# runs in its own session (setsid) so that nothing it signals on its way out
# can reach atolld or the workers, which share this script's process group.
dump_dom() {
    setsid -w timeout 90 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-background-networking \
        --disable-component-update --disable-sync --no-first-run \
        --user-data-dir="$(mktemp -d "$TMP/chrome.XXXXXX")" --virtual-time-budget=5000 \
        --dump-dom "$URL/" 2>>"$TMP/chromium.err" | tr '\n' ' ' >"$1" ||
        fail "chromium could not dump $URL/ (see chromium.err)"
    grep -q 'data-polls="[1-9]' "$1" || fail "the page never loaded data from the API (data-polls is 0)"
}

# cells FILE: one line per device cell tag (order of attributes free).
cells() { grep -o '<div class="device"[^>]*>' "$1" || true; }
# count_with STRING...: how many stdin lines contain every STRING.
count_with() {
    local n=0 line p ok
    while IFS= read -r line; do
        ok=1
        for p in "$@"; do [[ "$line" == *"$p"* ]] || { ok=0; break; }; done
        n=$((n + ok))
    done
    echo "$n"
}
row_state() {
    { grep -o "<tr data-job-id=\"$JOB\" data-state=\"[a-z]*\"" "$1" || true; } | head -n 1 | cut -d'"' -f4
}
W='data-island="west"'

dump_dom "$TMP/dom1.html"
total="$(cells "$TMP/dom1.html" | count_with "$W" 'data-index=')"
[ "$total" = 8 ] || fail "expected 8 device cells for west, found $total"
mine="$(cells "$TMP/dom1.html" | count_with "$W" 'data-state="allocated"' "data-job=\"$JOB\"")"
busy="$(cells "$TMP/dom1.html" | count_with "$W" 'data-state="allocated"')"
[ "$mine" = 4 ] || fail "expected 4 west cells allocated to job $JOB, found $mine"
[ "$busy" = 4 ] || fail "expected exactly 4 allocated west cells, found $busy"
state="$(row_state "$TMP/dom1.html")"
[[ "$state" == running || "$state" == allocated ]] ||
    fail "job row $JOB shows state '${state:-<no row>}', expected running or allocated"
note "page shows job $JOB on 4 devices of west, row state $state"

# ---------------------------------------------------------------- the end
wait_for 90 job_in succeeded failed cancelled || fail "job $JOB did not finish within 90 s"
job_in succeeded || fail "job $JOB ended $(job_state), expected succeeded"
dump_dom "$TMP/dom2.html"
state="$(row_state "$TMP/dom2.html")"
[ "$state" = succeeded ] || fail "job row $JOB shows '${state:-<no row>}' after success"
left="$(cells "$TMP/dom2.html" | count_with "$W" "data-job=\"$JOB\"")"
[ "$left" = 0 ] || fail "$left west cells still show job $JOB after it succeeded"
note "page shows job $JOB succeeded and its devices released"
echo "PASS: dashboard browser test"
