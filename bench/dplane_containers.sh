#!/usr/bin/env bash
# bench/dplane_containers.sh [N] - the data plane between two processes,
# issue 12's "what TCP gives across containers": bench_dplane's two-process
# mode (a 1-float ping-pong of N round trips, then 50 tensors of 4 MiB)
#   1. between two containers of the Atoll image on one podman network (each
#      in its own network, IPC and PID namespaces, so UCX picks TCP);
#   2. between the same two processes on this host (shared memory, and the
#      pool for the 4 MiB tensors, as two workers of one host);
#   3. on this host with --data-transport tcp (UCX's TCP over loopback).
# Needs build/bin/bench_dplane and the image (tests/container/run.sh builds
# localhost/atoll:latest; ATOLL_IMAGE names another). The containers run the
# host's bench binary, mounted read-only (the image is the same Debian 12).
# Removes its containers and network on exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
n=${1:-10000}
bin="$root/build/bin"
image=${ATOLL_IMAGE:-localhost/atoll:latest}
podman=(podman --runtime runc)
tag="atoll-dpbench-$$"
net="$tag-net"

[ -x "$bin/bench_dplane" ] || { echo "build bench_dplane first (cmake --build build)" >&2; exit 2; }
"${podman[@]}" image exists "$image" || { echo "no image $image (tests/container/run.sh builds it)" >&2; exit 2; }

cleanup() {
    "${podman[@]}" rm -f -t 0 "$tag-echo" "$tag-ping" >/dev/null 2>&1 || true
    "${podman[@]}" network rm -f "$net" >/dev/null 2>&1 || true
}
trap cleanup EXIT

pair() {   # pair LABEL ECHO_CMD PING_CMD: runs both, prints the pinger's lines
    local label=$1 echo_cmd=$2 ping_cmd=$3
    echo "$label"
    bash -c "$echo_cmd" >/dev/null &
    local echo_pid=$!
    bash -c "$ping_cmd"
    wait "$echo_pid"
}

# ---- 1. two containers
# runc wants explicit ulimits here, within this host's hard limits.
lim() { local hard; hard=$(ulimit -H "$1"); [ "$hard" = unlimited ] || [ "$hard" -ge "$2" ] && echo "$2" || echo "$hard"; }
nofile=$(lim -n 4096)
nproc=$(lim -u 4096)
"${podman[@]}" network create "$net" >/dev/null
for side in echo ping; do
    "${podman[@]}" run -d --name "$tag-$side" --network "$net" --no-healthcheck \
        --ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc" -v "$bin:/bench:ro" --entrypoint sleep "$image" infinity >/dev/null
done
addr_of() { "${podman[@]}" inspect -f "{{(index .NetworkSettings.Networks \"$net\").IPAddress}}" "$1"; }
ip_echo=$(addr_of "$tag-echo")
ip_ping=$(addr_of "$tag-ping")
pair "two containers, one podman network ($ip_ping -> $ip_echo):" \
    "${podman[*]} exec $tag-echo /bench/bench_dplane echo 0.0.0.0:7070 $ip_ping:7070 $n" \
    "${podman[*]} exec $tag-ping /bench/bench_dplane ping 0.0.0.0:7070 $ip_echo:7070 $n"

# ---- 2. and 3. two processes on this host
for tr in auto tcp; do
    extra=""
    [ "$tr" = tcp ] && extra=tcp
    pair "two processes on this host, --data-transport $tr:" \
        "'$bin/bench_dplane' echo 127.0.0.1:17071 127.0.0.1:17072 $n $extra" \
        "'$bin/bench_dplane' ping 127.0.0.1:17072 127.0.0.1:17071 $n $extra"
done
