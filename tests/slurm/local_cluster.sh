#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, running the fleet templates end to end:
# munged, slurmctld and slurmd from Debian's packages; deploy/slurm/submit.sh submits the
# two-item matrix (tests/slurm/fleet.yaml) as an array plus its collect job; the dashboard is
# then checked, and the daemons are stopped whatever happened.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$(id -u)" != 0 ]; then
  echo "slurm: skipped: starting munged, slurmctld and slurmd as a single-node cluster needs root"
  exit 0
fi
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  echo "slurm: installing slurmctld, slurmd, slurm-client and munge"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null
fi

work=$(mktemp -d /tmp/workbench-slurm.XXXXXX)
host=$(hostname -s)
cpus=$(nproc)
memory_mib=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 512 ))
export SLURM_CONF="$work/slurm.conf"
mkdir -p "$work/state" "$work/spool" "$work/root"
cat > "$SLURM_CONF" <<CONF
ClusterName=workbench-ci
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
SchedulerType=sched/backfill
NodeName=$host CPUs=$cpus RealMemory=$memory_mib State=UNKNOWN
PartitionName=ci Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF

munge_pid=""
stop() {
  scontrol shutdown >/dev/null 2>&1 || true
  sleep 1
  for pidfile in "$work/slurmd.pid" "$work/slurmctld.pid"; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  [ -n "$munge_pid" ] && kill "$munge_pid" 2>/dev/null || true
}
trap stop EXIT

mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
[ -f /etc/munge/munge.key ] || runuser -u munge -- /usr/sbin/mungekey --create
runuser -u munge -- /usr/sbin/munged --foreground >"$work/munged.log" 2>&1 &
munge_pid=$!
for _ in $(seq 50); do munge -n >/dev/null 2>&1 && break; sleep 0.2; done
slurmctld
slurmd
for _ in $(seq 60); do
  sinfo -h -o %T 2>/dev/null | grep -q idle && break
  sleep 1
done
sinfo -h -o "%P %T %c" | sed 's/^/slurm: node: /'

export WORKBENCH="$repo/.venv/bin/workbench"
submitted=$("$repo/deploy/slurm/submit.sh" "$repo/tests/slurm/fleet.yaml" "$work/root" 1)
echo "slurm: $submitted"
collect_id=${submitted##* }
deadline=$(( $(date +%s) + 900 ))
while squeue -h -j "$collect_id" 2>/dev/null | grep -q .; do
  if [ "$(date +%s)" -gt "$deadline" ]; then
    echo "slurm: the jobs did not finish within 15 minutes" >&2
    squeue >&2 || true
    exit 1
  fi
  sleep 3
done
echo "slurm: collect output:"
sed 's/^/  /' "$work/root"/workbench-collect-*.out
"$repo/.venv/bin/python" - "$work/root" <<'PY'
import json
import sys
from pathlib import Path

root = Path(sys.argv[1])
dashboard = json.loads((root / "matrix.json").read_text())
items = {item["name"]: item for item in dashboard["items"]}
assert set(items) == {"seed-mlp-cpu", "tiny-cnn-cpu"}, items
for name, item in items.items():
    assert item["state"] == "complete" and item["exit_code"] == 0, (name, item)
    assert item["verdict"] in ("pass", "attention", "blocker"), (name, item)
    assert (root / item["run"] / "02_op_coverage.html").is_file(), name
page = (root / "index.html").read_text()
assert "seed-mlp-cpu" in page and "tiny-cnn-cpu" in page
print(f"slurm: dashboard checked: {dashboard['headline']}")
PY
