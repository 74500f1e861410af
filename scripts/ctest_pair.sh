#!/usr/bin/env bash
# scripts/ctest_pair.sh [ROUNDS] [OUT_DIR] - issue 13's load proof: the
# ctest suite run ROUNDS times (default 10) while a second full ctest suite
# runs beside it, each `ctest -j2`, from two separate build trees of this
# checkout (build-pair-a, build-pair-b), so four test processes share the
# machine at every moment. Each round starts both suites together and waits
# for both, so every run of either suite had the other one beside it.
# The container test is left out (-LE container): both suites would build
# and start the same podman image names at once.
# Writes OUT_DIR/summary (one line per suite run: round, tree, rc, seconds,
# failed tests) and OUT_DIR/{a,b}.ROUND.log; exits non-zero when any run
# failed. Needs the build dependencies (scripts/deps.sh).
set -uo pipefail
ATOLL_ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ATOLL_ROOT/scripts/deps.sh"
rounds=${1:-10}
out=${2:-$ATOLL_ROOT/ctest-pair}
mkdir -p "$out"
: > "$out/summary"

atoll_build "$ATOLL_ROOT/build-pair-a" || exit 1
atoll_build "$ATOLL_ROOT/build-pair-b" || exit 1

# run_suite TREE ROUND: one full ctest of build-pair-TREE, its line in the
# summary.
run_suite() {
    local tree=$1 round=$2 t0 rc failed
    t0=$(date +%s)
    ctest --test-dir "$ATOLL_ROOT/build-pair-$tree" -j2 -LE container --output-on-failure \
        > "$out/$tree.$round.log" 2>&1
    rc=$?
    failed=$(grep -E '^\s+[0-9]+ - ' "$out/$tree.$round.log" | awk '{print $3}' | tr '\n' ' ')
    echo "round $round tree $tree rc=$rc $(( $(date +%s) - t0 ))s failed: ${failed:-none}" \
        >> "$out/summary"
}

for ((i = 1; i <= rounds; i++)); do
    run_suite a "$i" &
    run_suite b "$i" &
    wait
    tail -n 2 "$out/summary"
done
bad=$(grep -c -v 'rc=0 ' "$out/summary")
echo "$((2 * rounds - bad)) of $((2 * rounds)) suite runs green (each beside another)" | tee -a "$out/summary"
[ "$bad" -eq 0 ]
