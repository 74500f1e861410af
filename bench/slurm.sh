#!/usr/bin/env bash
# bench/slurm.sh - a one-node Slurm on this machine, for side-by-side
# figures (bench_run compares `srun -n 8` with an Atoll gang start).
#
#   bench/slurm.sh start    installs slurm-wlm and munge (apt) when missing,
#                           writes a one-node config (8 CPUs declared, so 8
#                           tasks fit on a 2-core box) under $SLURM_DIR,
#                           starts munged, slurmctld and slurmd, waits idle
#   bench/slurm.sh stop     stops them
#
# Needs root (daemons, /etc/munge). SLURM_DIR (default /tmp/atoll-slurm)
# holds the config, state, logs and pid files; SLURM_CONF points srun at it:
#   export SLURM_CONF=/tmp/atoll-slurm/slurm.conf
set -euo pipefail
DIR="${SLURM_DIR:-/tmp/atoll-slurm}"
CONF="$DIR/slurm.conf"

stop() {
    for d in slurmd slurmctld munged; do
        [ -f "$DIR/$d.pid" ] && kill "$(cat "$DIR/$d.pid")" 2>/dev/null || true
        rm -f "$DIR/$d.pid"
    done
}

start() {
    [ "$(id -u)" = 0 ] || { echo "bench/slurm.sh: run as root" >&2; exit 2; }
    if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            slurm-wlm munge >/dev/null
    fi
    stop
    mkdir -p "$DIR/state" "$DIR/spool" "$DIR/munge"
    [ -s /etc/munge/munge.key ] || { dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null;
                                     chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key; }
    chown munge:munge "$DIR/munge"
    runuser -u munge -- munged --socket="$DIR/munge/munge.socket" --pid-file="$DIR/munge/munged.pid" \
        --log-file="$DIR/munge/munged.log" --seed-file="$DIR/munge/munged.seed"
    cp "$DIR/munge/munged.pid" "$DIR/munged.pid"
    cat >"$CONF" <<CONF
ClusterName=atollbench
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=localhost CPUs=8 State=UNKNOWN
PartitionName=bench Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
    SLURM_CONF="$CONF" slurmctld -i
    SLURM_CONF="$CONF" slurmd
    for _ in $(seq 100); do
        SLURM_CONF="$CONF" sinfo -h -o %T 2>/dev/null | grep -q idle && break
        sleep 0.2
    done
    SLURM_CONF="$CONF" sinfo -h -o %T | grep -q idle || { echo "slurm did not come up: see $DIR/*.log" >&2; exit 1; }
    echo "slurm up: export SLURM_CONF=$CONF"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: bench/slurm.sh start|stop" >&2; exit 2 ;;
esac
