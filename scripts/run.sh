#!/usr/bin/env bash
# scripts/run.sh - install what is missing, build, and start a local Atoll:
# atolld on a SQLite file plus workers forming two islands (west=4x4 by four
# workers of 4 devices, east=2x4 by two workers of 4).
#   scripts/run.sh            start in the background, print the URL and examples
#   scripts/run.sh --foreground   same, but stay attached; Ctrl-C stops all
#   scripts/run.sh stop       stop what a previous run started
# Environment: ATOLL_PORT (default 8080), ATOLL_RUN_DIR (default ./run).
set -euo pipefail
ATOLL_ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ATOLL_ROOT/scripts/deps.sh"
RUN_DIR=${ATOLL_RUN_DIR:-$ATOLL_ROOT/run}
PORT=${ATOLL_PORT:-8080}

stop_all() {
    [ -f "$RUN_DIR/pids" ] || return 0
    while read -r pid; do kill "$pid" 2>/dev/null || true; done < "$RUN_DIR/pids"
    sleep 1
    while read -r pid; do kill -9 "$pid" 2>/dev/null || true; done < "$RUN_DIR/pids"
    rm -f "$RUN_DIR/pids"
}

if [ "${1:-}" = "stop" ]; then stop_all; echo "stopped"; exit 0; fi

atoll_install $ATOLL_BUILD_DEPS
atoll_build "$ATOLL_ROOT/build"
BIN=$ATOLL_ROOT/build/bin
mkdir -p "$RUN_DIR"
stop_all

"$BIN/atolld" --listen "127.0.0.1:$PORT" --db "$RUN_DIR/atoll.db" \
    --island west=4x4 --island east=2x4 --web-dir "$ATOLL_ROOT/web" --allow-run \
    > "$RUN_DIR/atolld.out" 2> "$RUN_DIR/atolld.log" &
echo $! > "$RUN_DIR/pids"
for _ in $(seq 100); do grep -q ready "$RUN_DIR/atolld.out" 2>/dev/null && break; sleep 0.1; done
if ! grep -q ready "$RUN_DIR/atolld.out"; then
    echo "atolld did not start; see $RUN_DIR/atolld.log:"; tail -n 20 "$RUN_DIR/atolld.log"; exit 1
fi
URL=http://127.0.0.1:$PORT
# Users' programs ("run" computations) never run as root unless told.
RUN_AS=()
[ "$(id -u)" -eq 0 ] && RUN_AS=(--run-as nobody)
n=0
for spec in west:4 west:4 west:4 west:4 east:4 east:4; do
    n=$((n + 1))
    "$BIN/atoll-worker" --controller "$URL" --island "${spec%%:*}" --devices "${spec##*:}" \
        "${RUN_AS[@]}" \
        > "$RUN_DIR/worker$n.out" 2> "$RUN_DIR/worker$n.log" &
    echo $! >> "$RUN_DIR/pids"
done
for _ in $(seq 100); do
    [ "$(cat "$RUN_DIR"/worker*.out 2>/dev/null | grep -c ready)" -eq 6 ] && break; sleep 0.1
done

cat <<MSG

Atoll is running: atolld + 6 workers (islands west=4x4, east=2x4).
  Dashboard:  $URL/
  Logs:       $RUN_DIR/*.log     Stop: scripts/run.sh stop

Submit the DESIGN example (two islands, a pipeline):
  curl -s -X POST $URL/v1/jobs -H 'Content-Type: application/json' -d @$ATOLL_ROOT/examples/demo.json
  curl -s $URL/v1/jobs/1
  curl -s $URL/v1/jobs/1/result
MSG
if [ "${1:-}" = "--foreground" ]; then
    trap 'stop_all; exit 0' INT TERM
    wait
fi
