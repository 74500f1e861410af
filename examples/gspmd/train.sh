#!/usr/bin/env bash
# examples/gspmd/train.sh [URL] - trains the small MLP of mlp_train.json on a
# running Atoll (scripts/run.sh) and prints each SGD step's loss, read from
# GET /v1/jobs/{id}/result?view=global. Needs curl and python3.
set -euo pipefail
U=${1:-${ATOLL_URL:-http://127.0.0.1:8080}}
AUTH=()
[ -n "${ATOLL_TOKEN:-}" ] && AUTH=(-H "Authorization: Bearer $ATOLL_TOKEN")
DOC="$(dirname "$0")/mlp_train.json"
id=$(curl -sf "${AUTH[@]}" -XPOST "$U/v1/jobs" -H 'Content-Type: application/json' \
        --data-binary @"$DOC" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
echo "job $id submitted"
for _ in $(seq 600); do
    state=$(curl -sf "${AUTH[@]}" "$U/v1/jobs/$id" |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
    case $state in succeeded|failed|cancelled) break ;; esac
    sleep 0.2
done
[ "$state" = succeeded ] || { echo "job $id $state" >&2; exit 1; }
curl -sf "${AUTH[@]}" "$U/v1/jobs/$id/result?view=global" | python3 -c '
import json, sys
out = json.load(sys.stdin)["outputs"]
steps = sorted((int(k[4:].split(".")[0]), v["sum"]) for k, v in out.items() if k.endswith(".loss"))
for i, loss in steps:
    print("step %d loss %.6f" % (i, loss))'
