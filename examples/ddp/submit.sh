#!/usr/bin/env bash
# Submits train.py as an 8-process DDP job on a 2x4 slice and prints rank
# 0's log. Needs atolld --allow-run (scripts/run.sh starts it so) and
# Debian's python3-torch on the workers' hosts.
#   examples/ddp/submit.sh [http://127.0.0.1:8080]
set -euo pipefail
URL=${1:-http://127.0.0.1:8080}
cd "$(dirname "$0")"
doc=$(/usr/bin/python3 - <<'PY'
import json
print(json.dumps({
    "name": "ddp-example",
    "slices": {"s": {"shape": [2, 4]}},
    "computations": [{
        "name": "train", "slice": "s", "outputs": ["weights"],
        "run": {"command": ["/usr/bin/python3", "train.py"],
                "files": {"train.py": open("train.py").read()}, "timeout_s": 600}}]}))
PY
)
id=$(curl -sf -XPOST "$URL/v1/jobs" -d "$doc" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
echo "job $id submitted; rank 0's output:"
curl -sfN "$URL/v1/jobs/$id/logs?process=0&follow=1"
state=running
while [ "$state" = running ] || [ "$state" = allocated ] || [ "$state" = queued ]; do
    sleep 0.2
    state=$(curl -sf "$URL/v1/jobs/$id" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
done
echo "job $id $state"
