#!/usr/bin/env bash
# tests/container/run.sh - the container image and the compose topology, for
# real: builds the Dockerfile with podman (runtime runc), runs atolld plus
# three workers forming islands west=2x4 and east=2x2 on a podman network,
# submits examples/demo.json with curl from the host and checks the result
# values (produce.z = 6.0, consume.w = 3.0 on every shard).
#
# Usage: tests/container/run.sh
#
# Phases:
#   1. apt-get install podman, runc, debootstrap and helpers (only missing
#      ones). If podman cannot be installed, or cannot start a container at
#      all, the test prints SKIP with the reason and exits 77: ctest reports
#      it as skipped (SKIP_RETURN_CODE), and scripts/test.sh fails on any
#      skipped test, so a machine that cannot run it never passes CI silently.
#   2. Base image docker.io/library/debian:bookworm-slim: no registry is
#      reachable from test machines, so when the image is missing it is made
#      locally (debootstrap --variant=minbase bookworm + podman import) and
#      kept in podman's store as the cache for later runs.
#   3. podman build --format docker (docker format keeps HEALTHCHECK).
#   4. Plain podman: network, volume, atolld, 3 workers; waits for the
#      image's HEALTHCHECK (podman healthcheck run) and the islands; runs the
#      demo job; checks the non-root user; stops atolld (SIGTERM must give
#      exit 0), replaces its container by a fresh one on the same volume and
#      checks the job is still there (the database lives on the volume).
#   4b. A users' program (run.image) in the image: a host atolld and worker
#      of this build (ATOLL_BIN_DIR) run it through podman run.
#   5. compose.yaml with podman-compose: up, health, demo job, result, down
#      (when it cannot run, or ATOLL_CONTAINER_COMPOSE=0: SKIP, exit 77).
# Every container, network and volume it makes is named after this run and
# removed on exit (trap), containers by their own names only.
#
# Environment: ATOLL_DEBIAN_MIRROR (default http://deb.debian.org/debian),
# ATOLL_CONTAINER_COMPOSE (auto|0), ATOLL_IMAGE (default localhost/atoll:latest),
# ATOLL_CONTAINER_CONTEXT (build context, default this checkout).
# Time: first run (debootstrap ~30 s, image build ~1-2 min on 2 cores) about
# 2-3 min; later runs reuse the base image and build cache (~1 min).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BASE_IMAGE=docker.io/library/debian:bookworm-slim
IMAGE="${ATOLL_IMAGE:-localhost/atoll:latest}"
CONTEXT="${ATOLL_CONTAINER_CONTEXT:-$ROOT}"   # build context (holds the Dockerfile)
MIRROR="${ATOLL_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
RUN_ID="atollct$$"                 # prefix of everything this run creates
NET="$RUN_ID-net"
VOL="$RUN_ID-db"
PROJECT="${RUN_ID}pc"              # compose project (its own network/volume)
TMP="$(mktemp -d "${TMPDIR:-/tmp}/atoll-container.XXXXXX")"
CONTAINERS=()                      # names, in start order
COMPOSE_UP=0

fail() { echo "FAIL: $*" >&2; exit 1; }
note() { echo "-- [+${SECONDS}s] $*" >&2; }
skip() { echo "SKIP: container test: $*" >&2; exit 77; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null && sudo -n true 2>/dev/null && SUDO="sudo"
fi
PODMAN=($SUDO podman --runtime runc)

# ---------------------------------------------------------------- cleanup
show_logs() {
    local c
    for c in "${CONTAINERS[@]}"; do
        echo "---- last lines of container $c" >&2
        "${PODMAN[@]}" logs --tail 25 "$c" >&2 2>&1 || true
    done
    if [ "$COMPOSE_UP" = 1 ]; then
        for c in $(compose_containers); do
            echo "---- last lines of container $c" >&2
            "${PODMAN[@]}" logs --tail 25 "$c" >&2 2>&1 || true
        done
    fi
}

# Removes what this run created, by name: containers (workers first, 10 s
# to drain), then the compose project, the network and the volume.
cleanup() {
    local rc=$? i
    [ "$rc" -ne 0 ] && show_logs
    if [ "$rc" -ne 0 ] && [ ${#HOST_PIDS[@]} -gt 0 ]; then
        for f in "$TMP"/host-*.err; do echo "---- last lines of $f" >&2; tail -n 20 "$f" >&2; done
    fi
    stop_host
    for ((i = ${#CONTAINERS[@]} - 1; i >= 0; i--)); do
        timeout 30 "${PODMAN[@]}" rm -f -t 10 "${CONTAINERS[i]}" >/dev/null 2>&1 || true
    done
    if [ "$COMPOSE_UP" = 1 ]; then
        compose down -v >"$TMP/compose-down.log" 2>&1 || true
        # podman-compose 1.0 leaves the project's network behind.
        timeout 30 "${PODMAN[@]}" network rm -f "${PROJECT}_default" >/dev/null 2>&1 || true
        timeout 30 "${PODMAN[@]}" volume rm -f "${PROJECT}_atoll-db" >/dev/null 2>&1 || true
    fi
    timeout 30 "${PODMAN[@]}" network rm -f "$NET" >/dev/null 2>&1 || true
    timeout 30 "${PODMAN[@]}" volume rm -f "$VOL" >/dev/null 2>&1 || true
    rm -rf "$TMP"
    exit "$rc"
}
# Stops the host atolld and worker of phase 4b (worker first), SIGKILL
# after 10 s.
HOST_PIDS=()
stop_host() {
    local i pid
    for ((i = ${#HOST_PIDS[@]} - 1; i >= 0; i--)); do
        pid=${HOST_PIDS[i]}
        kill -TERM "$pid" 2>/dev/null || continue
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    HOST_PIDS=()
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_for SECONDS CMD...: retries CMD every 0.5 s until it succeeds.
wait_for() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.5
    done
}

# ---------------------------------------------------------------- 1. tools
pkg_missing() { ! dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
apt_install() {
    local missing=() p
    for p in "$@"; do pkg_missing "$p" && missing+=("$p"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    note "installing: ${missing[*]}"
    { $SUDO apt-get update -qq || true; } >>"$TMP/apt.log" 2>&1
    DEBIAN_FRONTEND=noninteractive timeout 600 $SUDO apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >>"$TMP/apt.log" 2>&1
}
# netavark needs iptables; aardvark-dns gives containers each other's names.
if ! apt_install podman runc debootstrap slirp4netns fuse-overlayfs uidmap netavark \
        aardvark-dns iptables curl python3 ca-certificates; then
    command -v podman >/dev/null ||
        skip "podman cannot be installed here (apt-get failed: $(tail -n 3 "$TMP/apt.log" | tr '\n' ' '))"
    note "some helper packages failed to install; trying with what is there"
fi
command -v podman >/dev/null || skip "podman cannot be installed here (no podman after apt-get)"
apt_install podman-compose || note "podman-compose not installable (the compose phase will skip)"

# ulimits must be explicit (runc refuses the engine's defaults here) and may
# not exceed this host's hard limits.
limit() { local want=$1 hard=$2; [ "$hard" = unlimited ] || [ "$hard" -ge "$want" ] && echo "$want" || echo "$hard"; }
NOFILE="$(limit 16384 "$(ulimit -Hn)")"
NPROC="$(limit 4096 "$(ulimit -Hu)")"
ULIMITS=(--ulimit "nofile=$NOFILE:$NOFILE" --ulimit "nproc=$NPROC:$NPROC")
# Without systemd, podman cannot arm healthcheck timers (it logs an error per
# container); the test runs the HEALTHCHECK itself with `podman healthcheck run`.
HEALTH_TIMER=()
[ -S /run/systemd/private ] || HEALTH_TIMER=(--health-interval disable)

# ---------------------------------------------------------------- 2. base image
# One run at a time makes the base image (flock): concurrent test runs would
# otherwise debootstrap twice and race on the tag.
make_base() {
    if "${PODMAN[@]}" image exists "$BASE_IMAGE"; then
        note "base image $BASE_IMAGE present (cached)"
        return 0
    fi
    local rootfs="$TMP/rootfs" t0=$SECONDS
    note "making $BASE_IMAGE: debootstrap --variant=minbase bookworm from $MIRROR"
    timeout 900 $SUDO debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" >"$TMP/debootstrap.log" 2>&1 ||
        fail "debootstrap failed: $(tail -n 5 "$TMP/debootstrap.log")"
    # The same suites as Debian's own image, so apt in the build gets updates.
    $SUDO tee "$rootfs/etc/apt/sources.list" >/dev/null <<EOF
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
    $SUDO rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
    $SUDO tar -C "$rootfs" -c . | timeout 300 "${PODMAN[@]}" import --change 'CMD ["bash"]' - "$BASE_IMAGE" \
        >"$TMP/import.log" 2>&1 || fail "podman import failed: $(tail -n 5 "$TMP/import.log")"
    $SUDO rm -rf "$rootfs"
    note "base image made in $((SECONDS - t0)) s"
}
exec 9>"${TMPDIR:-/tmp}/atoll-container-base.lock"
flock -w 1200 9 || fail "another run held the base-image lock for 20 min"
make_base
exec 9>&-

# Podman must be able to run a container at all here, with the limits above.
if ! timeout 120 "${PODMAN[@]}" run --rm "${ULIMITS[@]}" --network none "$BASE_IMAGE" true \
        >"$TMP/smoke.log" 2>&1; then
    skip "podman cannot run containers on this machine: $(tr '\n' ' ' <"$TMP/smoke.log")"
fi

# ---------------------------------------------------------------- 3. image
note "podman build -> $IMAGE"
t0=$SECONDS
timeout 1200 "${PODMAN[@]}" build --format docker "${ULIMITS[@]}" --build-arg JOBS=2 \
    -t "$IMAGE" -f "$CONTEXT/Dockerfile" "$CONTEXT" >"$TMP/build.log" 2>&1 ||
    fail "podman build failed: $(tail -n 30 "$TMP/build.log")"
note "image built in $((SECONDS - t0)) s ($("${PODMAN[@]}" image inspect "$IMAGE" --format '{{.Size}}') bytes)"
[ "$("${PODMAN[@]}" image inspect "$IMAGE" --format '{{.User}}')" = atoll:atoll ] ||
    fail "image does not run as the atoll user"
"${PODMAN[@]}" image inspect "$IMAGE" | grep -q '"Healthcheck"' ||
    fail "image has no HEALTHCHECK (built without --format docker?)"

# ---------------------------------------------------------------- helpers
# check_demo URL: submits examples/demo.json, waits for success, checks that
# its all_reduce spanned two worker containers and every shard's values
# (produce.z: 6.0 = 0+1+2+3 summed over the 2x2 slice; consume.w: half of
# it, on the east island, another container). Sets JOB.
check_demo() {
    local url=$1 code state
    code="$(curl -sS -o "$TMP/submit.json" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
        --data-binary @"$ROOT/examples/demo.json" "$url/v1/jobs")" || fail "POST $url/v1/jobs: curl failed"
    [ "$code" = 201 ] || fail "POST /v1/jobs answered $code: $(cat "$TMP/submit.json")"
    JOB="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' <"$TMP/submit.json")"
    note "job $JOB submitted"
    job_done() {
        state="$(curl -fsS "$url/v1/jobs/$JOB" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')" &&
            [[ "$state" == succeeded || "$state" == failed || "$state" == cancelled ]]
    }
    # 120 s: room for one requeue after a lost worker (lease 5 s + retry).
    wait_for 120 job_done || fail "job $JOB did not finish within 120 s (state: ${state:-?})"
    [ "$state" = succeeded ] || fail "job $JOB ended $state: $(curl -sS "$url/v1/jobs/$JOB")"
    # The all_reduce crossed containers: slice a's devices are on both west
    # workers (4 devices each, island rows), so its shards met over UCX's TCP.
    curl -fsS "$url/v1/jobs/$JOB" | python3 -c '
import json, sys
devs = json.load(sys.stdin)["slices"]["a"]["devices"]
assert len({d["index"] // 4 for d in devs}) == 2, devs' ||
        fail "job $JOB: slice a does not span both west workers"
    curl -fsS "$url/v1/jobs/$JOB/result" >"$TMP/result.json" || fail "GET result of job $JOB failed"
    python3 - "$TMP/result.json" <<'EOF' || fail "wrong result: $(cat "$TMP/result.json")"
import json, sys
out = json.load(open(sys.argv[1]))["outputs"]
for key, want in (("produce.z", 6.0), ("consume.w", 3.0)):
    shards = out[key]
    assert [s["shard"] for s in shards] == [0, 1, 2, 3], (key, "shards")
    for s in shards:
        assert s["shape"] == [4] and s["values"] == [want] * 4, (key, s)
        assert s["sum"] == 4 * want, (key, s)
print("result ok: produce.z = 6.0 and consume.w = 3.0 on all 4 shards", file=sys.stderr)
EOF
}

# islands_ready URL: every device of west (8) and east (4) is free.
islands_ready() {
    curl -fsS "$1/v1/islands" 2>/dev/null | python3 -c '
import json, sys
isl = {i["name"]: i for i in json.load(sys.stdin)["islands"]}
free = {n: sum(d["state"] == "free" for d in i["devices"]) for n, i in isl.items()}
sys.exit(0 if free.get("west") == 8 and free.get("east") == 4 else 1)' 2>/dev/null
}

# dns_settled CONTAINER...: each container resolves every service name of
# the topology. aardvark-dns (podman's DNS) reloads whenever a container
# joins the network and can drop queries meanwhile (containers/aardvark-dns
# #389); workers recover from that by re-registering, but the test waits for
# a settled network so the job it submits runs on the workers it sees.
SERVICES=(atolld worker-west-1 worker-west-2 worker-east-1)
dns_settled() {
    local c
    for c in "$@"; do
        timeout 5 "${PODMAN[@]}" exec "$c" getent ahostsv4 "${SERVICES[@]}" >/dev/null 2>&1 || return 1
    done
}

healthy() { "${PODMAN[@]}" healthcheck run "$1" >/dev/null 2>&1; }
host_url() {  # host_url CONTAINER: the URL its published 8080 has on the host
    local hp
    hp="$("${PODMAN[@]}" port "$1" 8080/tcp | head -n 1)" || return 1
    [ -n "$hp" ] && echo "http://$hp"
}

# ---------------------------------------------------------------- 4. plain podman
note "plain podman: network $NET, volume $VOL"
"${PODMAN[@]}" network create "$NET" >/dev/null || fail "podman network create failed"
"${PODMAN[@]}" volume create "$VOL" >/dev/null || fail "podman volume create failed"

run_atolld() {
    local name="$RUN_ID-atolld-$1"
    CONTAINERS+=("$name")
    "${PODMAN[@]}" run -d --name "$name" --network "$NET" --network-alias atolld "${ULIMITS[@]}" \
        "${HEALTH_TIMER[@]}" -e ATOLL_ISLANDS=west=2x4,east=2x2 -v "$VOL:/var/lib/atoll" \
        -p 127.0.0.1::8080 "$IMAGE" >/dev/null 2>"$TMP/run-$name.err" ||
        fail "podman run atolld failed: $(cat "$TMP/run-$name.err")"
    ATOLLD="$name"
    wait_for 60 healthy "$name" || fail "atolld container never passed its HEALTHCHECK"
    URL="$(host_url "$name")" || fail "no published port for $name"
}
run_atolld 1
note "atolld healthy at $URL"

for spec in west-1:west west-2:west east-1:east; do
    svc="worker-${spec%%:*}"
    name="$RUN_ID-$svc"
    CONTAINERS+=("$name")
    "${PODMAN[@]}" run -d --name "$name" --network "$NET" --network-alias "$svc" "${ULIMITS[@]}" \
        --no-healthcheck --entrypoint atoll-worker \
        -e ATOLL_CONTROLLER=http://atolld:8080 -e ATOLL_ISLAND="${spec##*:}" -e ATOLL_DEVICES=4 \
        -e ATOLL_DATA_LISTEN=0.0.0.0:7070 -e ATOLL_DATA_ADVERTISE="$svc" \
        "$IMAGE" >/dev/null 2>"$TMP/run-$name.err" || fail "podman run $svc failed: $(cat "$TMP/run-$name.err")"
done
WORKERS=("${CONTAINERS[@]:1}")
wait_for 60 dns_settled "${WORKERS[@]}" || fail "worker containers cannot resolve ${SERVICES[*]}"
wait_for 60 islands_ready "$URL" || fail "islands never fully covered: $(curl -sS "$URL/v1/islands")"
note "islands west=2x4 (2 workers) and east=2x2 (1 worker) ready"

check_demo "$URL"
[ "$("${PODMAN[@]}" exec "$ATOLLD" id -u)" = 10001 ] || fail "atolld does not run as uid 10001"

# Online backup (docs/operations.md): atolld owns its database, so the copy
# comes from GET /v1/admin/backup; the image's sqlite3 checks it is a
# consistent database holding the job. The live file is locked to others.
"${PODMAN[@]}" exec "$ATOLLD" curl -fsS -o /var/lib/atoll/backup.db http://127.0.0.1:8080/v1/admin/backup ||
    fail "GET /v1/admin/backup inside the atolld container failed"
n="$("${PODMAN[@]}" exec "$ATOLLD" sqlite3 /var/lib/atoll/backup.db \
    "PRAGMA integrity_check; SELECT count(*) FROM jobs WHERE state = 'succeeded'" | tr '\n' ' ')"
[ "$n" = "ok 1 " ] || fail "backup copy: integrity/jobs gave '$n', expected 'ok 1'"
if "${PODMAN[@]}" exec "$ATOLLD" sqlite3 /var/lib/atoll/atoll.db "SELECT count(*) FROM jobs" >/dev/null 2>&1; then
    fail "another process read the live database: atolld should own it"
fi
"${PODMAN[@]}" exec "$ATOLLD" rm -f /var/lib/atoll/backup.db

# SIGTERM (podman stop) must drain and exit 0; a fresh container on the same
# volume must still know the job: the database lives on the volume.
timeout 60 "${PODMAN[@]}" stop -t 20 "$ATOLLD" >/dev/null || fail "podman stop atolld failed"
ec="$("${PODMAN[@]}" inspect "$ATOLLD" --format '{{.State.ExitCode}}')"
[ "$ec" = 0 ] || fail "atolld exited $ec on SIGTERM, expected 0"
timeout 60 "${PODMAN[@]}" rm "$ATOLLD" >/dev/null
run_atolld 2
state="$(curl -fsS "$URL/v1/jobs/$JOB" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')"
[ "$state" = succeeded ] || fail "after replacing atolld's container, job $JOB is '$state', expected succeeded"
note "atolld exited 0 on SIGTERM; a new container on volume $VOL still has job $JOB succeeded"
# Workers keep heartbeating to the new controller under the same alias.
wait_for 60 islands_ready "$URL" || fail "workers did not rejoin the new atolld: $(curl -sS "$URL/v1/workers")"
check_demo "$URL"
echo "PASS: container test, plain podman (image, healthcheck, islands, demo job, volume)" >&2

# ---------------------------------------------------------------- 4b. run.image
# A users' program inside the image (DESIGN Part F `image`): a host atolld
# --allow-run and a host worker (this build's, ATOLL_BIN_DIR) start each
# process with podman run; it must find the image's own files (the host has
# no /usr/local/bin/atoll-worker), read its input .npy from the mounted work
# dir and leave its output there: the result is the input, back through the
# controller. Also: no container of the job is left when it ends.
BIN="${ATOLL_BIN_DIR:-$ROOT/build/bin}"
[ -x "$BIN/atolld" ] && [ -x "$BIN/atoll-worker" ] || fail "no atolld/atoll-worker in $BIN (set ATOLL_BIN_DIR)"
[ ! -e /usr/local/bin/atoll-worker ] || fail "/usr/local/bin/atoll-worker exists on the host: the image check would prove nothing"
"$BIN/atolld" --listen 127.0.0.1:0 --db "$TMP/run.db" --island img=2 --allow-run \
    >"$TMP/host-atolld.out" 2>"$TMP/host-atolld.err" &
HOST_PIDS+=($!)
host_ready() { grep -qo 'http://127\.0\.0\.1:[0-9][0-9]*' "$TMP/host-atolld.out"; }
wait_for 20 host_ready || fail "host atolld printed no URL: $(cat "$TMP/host-atolld.err")"
HURL="$(grep -o 'http://127\.0\.0\.1:[0-9][0-9]*' "$TMP/host-atolld.out" | head -n 1)"
RUN_AS=()
[ "$(id -u)" = 0 ] && RUN_AS=(--run-as nobody)
# The worker's podman uses the runtime this test's own podman uses (runc):
# where crun is also installed podman would pick it, and crun refuses to
# run on a host with cgroups v1 controllers mounted (hybrid mode).
"$BIN/atoll-worker" --controller "$HURL" --island img --devices 2 "${RUN_AS[@]}" \
    --container-runtime runc \
    >"$TMP/host-worker.out" 2>"$TMP/host-worker.err" &
HOST_WORKER=$!
HOST_PIDS+=($HOST_WORKER)
img_ready() {
    curl -fsS "$HURL/v1/islands/img" 2>/dev/null | python3 -c '
import json, sys; i = json.load(sys.stdin); sys.exit(0 if i["free"] == 2 else 1)' 2>/dev/null
}
wait_for 30 img_ready || fail "host worker never covered island img: $(cat "$TMP/host-worker.err")"
python3 - "$IMAGE" >"$TMP/run-job.json" <<'EOF'
import json, sys
script = ('test -x /usr/local/bin/atoll-worker && echo "in image, rank $RANK as $(id -un)" && '
          'cp "$ATOLL_INPUT_DIR/x.npy" "$ATOLL_OUTPUT_DIR/y.npy"')
print(json.dumps({"name": "in-image", "max_retries": 0, "slices": {"s": {"shape": [2]}},
    "computations": [
        {"name": "p", "slice": "s", "outputs": ["x"], "ops": [
            {"op": "shard_index", "out": "i"}, {"op": "fill", "out": "o", "shape": [3], "value": 1},
            {"op": "mul", "args": ["o", "i"], "out": "t"}, {"op": "add", "args": ["t", "o"], "out": "x"}]},
        {"name": "r", "slice": "s", "inputs": {"x": "p.x"}, "outputs": ["y"],
         "run": {"command": ["/bin/sh", "-c", script], "image": sys.argv[1], "timeout_s": 300}}]}))
EOF
code="$(curl -sS -o "$TMP/run-submit.json" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    --data-binary @"$TMP/run-job.json" "$HURL/v1/jobs")" || fail "POST run job: curl failed"
[ "$code" = 201 ] || fail "run job answered $code: $(cat "$TMP/run-submit.json")"
RJOB="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' <"$TMP/run-submit.json")"
run_done() {
    state="$(curl -fsS "$HURL/v1/jobs/$RJOB" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')" &&
        [[ "$state" == succeeded || "$state" == failed || "$state" == cancelled ]]
}
wait_for 300 run_done || fail "run job $RJOB did not finish within 300 s (state: ${state:-?})"
[ "$state" = succeeded ] || fail "run job $RJOB ended $state: $(curl -sS "$HURL/v1/jobs/$RJOB")"
curl -fsS "$HURL/v1/jobs/$RJOB/result" | python3 -c '
import json, sys
out = json.load(sys.stdin)["outputs"]["r.y"]
assert [(s["shard"], s["values"]) for s in out] == [(0, [1.0] * 3), (1, [2.0] * 3)], out' ||
    fail "run job $RJOB: r.y is not its input (1s on shard 0, 2s on shard 1)"
log="$(curl -fsS "$HURL/v1/jobs/$RJOB/logs?process=1")"
want="in image, rank 1 as $([ ${#RUN_AS[@]} -gt 0 ] && echo nobody || id -un)"
[ "$log" = "$want" ] || fail "run job $RJOB process 1 wrote '$log', expected '$want'"
# Containers are named atoll-w<worker pid>-j<job>-...: this worker's only (one
# an earlier, aborted run on this host left is not this run's).
if "${PODMAN[@]}" ps -a --format '{{.Names}}' | grep -q "^atoll-w$HOST_WORKER-j$RJOB-"; then
    fail "a container of run job $RJOB is left: $("${PODMAN[@]}" ps -a --format '{{.Names}} {{.Status}}')"
fi
stop_host
echo "PASS: container test, run.image (a users' program in $IMAGE through podman run: input, output, user, logs)" >&2

# ---------------------------------------------------------------- 5. compose
compose() {
    timeout 300 $SUDO env ATOLL_IMAGE="$IMAGE" ATOLL_PUBLISH="127.0.0.1:" \
        podman-compose --podman-args="--runtime runc" -p "$PROJECT" -f "$ROOT/compose.yaml" "$@"
}
compose_containers() {
    "${PODMAN[@]}" ps -a --filter "label=com.docker.compose.project=$PROJECT" --format '{{.Names}}'
}
# A phase that cannot run is a skip (exit 77, which scripts/test.sh fails
# on), never a pass: compose.yaml would otherwise go untested.
if [ "${ATOLL_CONTAINER_COMPOSE:-auto}" = 0 ]; then
    skip "compose phase not run (ATOLL_CONTAINER_COMPOSE=0)"
elif ! command -v podman-compose >/dev/null; then
    skip "compose phase cannot run: podman-compose not installed"
elif [ "$NOFILE" -lt 16384 ] || [ "$NPROC" -lt 4096 ]; then
    skip "compose phase cannot run: host hard limits below compose.yaml's ulimits (nofile 16384, nproc 4096)"
else
    # The plain-podman cluster goes first: two clusters would only share CPU.
    for ((i = ${#CONTAINERS[@]} - 1; i >= 0; i--)); do
        timeout 30 "${PODMAN[@]}" rm -f -t 10 "${CONTAINERS[i]}" >/dev/null 2>&1 || true
    done
    CONTAINERS=()
    note "podman-compose -p $PROJECT up -d ($(podman-compose version 2>/dev/null | grep -i 'podman-compose' | head -n 1))"
    COMPOSE_UP=1
    compose up -d --no-build >"$TMP/compose-up.log" 2>&1 || fail "podman-compose up failed: $(tail -n 20 "$TMP/compose-up.log")"
    CATOLLD="$("${PODMAN[@]}" ps --filter "label=com.docker.compose.project=$PROJECT" \
        --filter label=com.docker.compose.service=atolld --format '{{.Names}}' | head -n 1)"
    [ -n "$CATOLLD" ] || fail "compose started no atolld container: $(tail -n 20 "$TMP/compose-up.log")"
    wait_for 60 healthy "$CATOLLD" || fail "compose atolld never passed its HEALTHCHECK"
    CURL_="$(host_url "$CATOLLD")" || fail "no published port for $CATOLLD"
    note "compose atolld healthy at $CURL_"
    mapfile -t CWORKERS < <("${PODMAN[@]}" ps --filter "label=com.docker.compose.project=$PROJECT" \
        --format '{{.Names}}' | grep -v -- "$CATOLLD")
    [ "${#CWORKERS[@]}" = 3 ] || fail "compose started ${#CWORKERS[@]} workers, expected 3"
    wait_for 60 dns_settled "${CWORKERS[@]}" || fail "compose workers cannot resolve ${SERVICES[*]}"
    wait_for 60 islands_ready "$CURL_" || fail "compose islands never fully covered: $(curl -sS "$CURL_/v1/islands")"
    check_demo "$CURL_"
    compose down -v >"$TMP/compose-down.log" 2>&1 || fail "podman-compose down failed: $(tail -n 20 "$TMP/compose-down.log")"
    [ -z "$(compose_containers)" ] || fail "containers left after compose down: $(compose_containers)"
    echo "PASS: container test, compose.yaml with podman-compose" >&2
fi
echo "PASS: container test"
