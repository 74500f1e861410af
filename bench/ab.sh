#!/usr/bin/env bash
# bench/ab.sh A B ROUNDS BENCH [ARGS...] - before and after in one run.
#
# Runs BENCH (a program of this tree's build/bin, e.g. bench_pathways) ROUNDS
# times against the atolld and atoll-worker of A and of B, alternately (A, B,
# A, B, ...: the drift of a shared or virtual machine falls on both alike),
# through ATOLL_BIN_DIR, and prints for every `name value` line the bench
# printed: the median of each side, their ranges, and the ratio of the
# medians (B / A). A and B are directories holding atolld and atoll-worker,
# or `rev:REV` for a git revision of this repository, built here first into
# a scratch worktree (same compiler and flags as build/).
#
#   bench/ab.sh rev:HEAD~1 build/bin 5 bench_pathways util
#
# On the 2-core development VM a chain's figures swing by ±30 % between
# runs of one build, so a change smaller than that needs several rounds
# before its medians say anything; the ranges show how far they overlap.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 4 ] || { sed -n 2,17p "$0" >&2; exit 2; }
side_a=$1 side_b=$2 rounds=$3 bench=$4
shift 4
tmp=$(mktemp -d)
# Worktrees live under $tmp (bin_dir runs in a subshell: nothing to list).
cleanup() {
    rm -rf "$tmp"
    git -C "$root" worktree prune
}
trap cleanup EXIT

# A side's binaries directory; builds rev:REV in a worktree under $tmp.
bin_dir() {
    local spec=$1 label=$2
    if [[ $spec != rev:* ]]; then
        [ -x "$spec/atolld" ] && [ -x "$spec/atoll-worker" ] ||
            { echo "ab.sh: $spec holds no atolld and atoll-worker" >&2; exit 2; }
        (cd "$spec" && pwd)
        return
    fi
    local wt=$tmp/wt-$label
    git -C "$root" worktree add --detach "$wt" "${spec#rev:}" >/dev/null 2>&1
    cmake -S "$wt" -B "$wt/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATOLL_TESTS=OFF >/dev/null
    cmake --build "$wt/build" -j"$(nproc)" --target atolld atoll-worker >/dev/null
    echo "$wt/build/bin"
}

dir_a=$(bin_dir "$side_a" a)
dir_b=$(bin_dir "$side_b" b)
prog=$root/build/bin/$bench
[ -x "$prog" ] || { echo "ab.sh: no $prog (build the tree first)" >&2; exit 2; }
echo "ab.sh: A = $side_a ($dir_a), B = $side_b ($dir_b), $rounds rounds of $bench $*"
for r in $(seq "$rounds"); do
    for side in a b; do
        dir=$dir_a
        [ $side = b ] && dir=$dir_b
        if ! ATOLL_BIN_DIR=$dir "$prog" "$@" > "$tmp/out.$side.$r" 2> "$tmp/err.$side.$r"; then
            echo "ab.sh: round $r side $side failed; its stderr:" >&2
            tail -20 "$tmp/err.$side.$r" >&2
            exit 1
        fi
    done
done

# Every numeric `name value` line as "name side value", sorted by name, side
# and value; then each (name, side) run's median and range, and per name
# the ratio of medians.
for side in a b; do
    cat "$tmp"/out.$side.* | awk -v s=$side 'NF == 2 && $2 ~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/ {print $1, s, $2}'
done | sort -k1,1 -k2,2 -k3,3g | awk '
    function flush() {
        if (n == 0) return
        med = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
        if (side == "a") { ma = med; lo_a = v[1]; hi_a = v[n]; have_a = 1 }
        else if (have_a && name == aname) {
            printf "%-60s A %12.6g [%g..%g]  B %12.6g [%g..%g]  B/A %s\n", name, ma, lo_a, hi_a,
                   med, v[1], v[n], ma != 0 ? sprintf("%.3f", med / ma) : "-"
        }
        if (side == "a") aname = name
        n = 0
    }
    { if ($1 != name || $2 != side) { flush(); if ($1 != name) have_a = 0; name = $1; side = $2 }
      v[++n] = $3 }
    END { flush() }'
