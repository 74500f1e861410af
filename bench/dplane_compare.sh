#!/usr/bin/env bash
# bench/dplane_compare.sh [OLD_REV] [ROUNDS] [IDLE_S] - issue 12's side by
# side: bench/bench_dplane.c built against the socket + memfd-ring data plane
# of OLD_REV (default fe3b0c6, the last commit before UCX) and against this
# tree's UCX data plane, with the same compiler and flags, run one after the
# other on this machine. Prints both reports. Needs the build dependencies
# (scripts/deps.sh) and git.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
old=${1:-fe3b0c6}
rounds=${2:-200}
idle=${3:-10}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

build() {      # build SRC_DIR OUT [extra sources and flags...]
    local src=$1 out=$2
    shift 2
    (cd "$src" && gcc -std=c11 -O2 -D_GNU_SOURCE -Icommon -Iworkers bench/bench_dplane.c \
        common/util.c common/tensor.c "$@" -o "$out" -lpthread -lm)
}

mkdir -p "$tmp/old/bench" "$tmp/new/bench"
git -C "$root" archive "$old" workers common | tar -x -C "$tmp/old"
cp -r "$root/workers" "$root/common" "$tmp/new/"
cp "$root/bench/bench_dplane.c" "$tmp/old/bench/"
cp "$root/bench/bench_dplane.c" "$tmp/new/bench/"
# shellcheck disable=SC2046
build "$tmp/old" "$tmp/bench_old"
# shellcheck disable=SC2046
# The UCX data plane's other files (bench_dplane.c includes dplane.c and
# mbox.c itself).
build "$tmp/new" "$tmp/bench_new" workers/dplane_frame.c workers/dplane_rx.c \
    workers/dplane_progress.c workers/shmpool.c $(pkg-config --cflags --libs ucx)

echo "== before: $old ($(git -C "$root" log -1 --format=%s "$old" | cut -c1-60))"
"$tmp/bench_old" "$rounds" "$idle"
echo
echo "== after: this tree"
"$tmp/bench_new" "$rounds" "$idle"
