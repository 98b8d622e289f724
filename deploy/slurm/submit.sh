#!/bin/bash
# Submit a matrix as a Slurm array plus its collect job, and print both job ids.
#   deploy/slurm/submit.sh MATRIX ROOT [MAX_AT_ONCE]
# The matrix is checked first (every item's workload and parameters): a bad item stops the
# submission with one sentence per item, before any node is booked.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 MATRIX ROOT [MAX_AT_ONCE]" >&2
  exit 2
fi
matrix=$(realpath "$1")
root=$(realpath -m "$2")
at_once=${3:-4}
here=$(cd "$(dirname "$0")" && pwd)
WORKBENCH=${WORKBENCH:-workbench}
count=$("$WORKBENCH" matrix "$matrix" --count)
mkdir -p "$root"
array=$(sbatch --parsable --array="0-$((count - 1))%$at_once" --chdir="$root" \
  --export="ALL,WORKBENCH=$WORKBENCH,WORKBENCH_MATRIX=$matrix,WORKBENCH_ROOT=$root" \
  "$here/workbench-array.sbatch")
collect=$(sbatch --parsable --dependency="afterany:$array" --chdir="$root" \
  --export="ALL,WORKBENCH=$WORKBENCH,WORKBENCH_ROOT=$root" "$here/workbench-collect.sbatch")
echo "array job $array ($count items, at most $at_once at once); collect job $collect"
