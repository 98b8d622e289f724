#!/bin/bash
# Submit a matrix as Slurm arrays plus one collect job, and print the job ids.
#   deploy/slurm/submit.sh MATRIX ROOT [MAX_AT_ONCE [TARGET[:PARTITION[:WORKBENCH]] ...]]
# Without TARGET: one array over every item, all on the same kind of node. A fleet on two
# targets names each one, for example
#   deploy/slurm/submit.sh matrix.yaml /fsx/nightly 4 \
#     xla:trn1:/opt/trn1/bin/workbench neuron:trn2:/opt/trn2/bin/workbench
# which submits one array per target (sized by `workbench matrix MATRIX --count --target T`,
# on that target's partition, run by that target's workbench; the default partition and
# $WORKBENCH where left out). Every array writes into ROOT, and one collect job after all of
# them builds the one dashboard; items of a target that was not submitted show as missing.
# The matrix is checked first (every item's workload, target name and parameters; whether a
# device is present is each item's own check, on its node): a bad item stops the submission
# with one sentence per item, before any node is booked.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 MATRIX ROOT [MAX_AT_ONCE [TARGET[:PARTITION[:WORKBENCH]] ...]]" >&2
  exit 2
fi
matrix=$(realpath "$1")
root=$(realpath -m "$2")
at_once=${3:-4}
shift $(($# < 3 ? $# : 3))
[ $# -gt 0 ] || set -- ""  # no TARGET: one array over every item
here=$(cd "$(dirname "$0")" && pwd)
WORKBENCH=${WORKBENCH:-workbench}
# sbatch --export splits its list at commas: a value holding one would add variables of its own
# (a matrix path "m,LD_PRELOAD=x.so"). Such a value is refused before anything is submitted.
plain() {
  case "$2" in
    *,* | *$'\n'* | *\'* | *\"*)
      echo "submit.sh: $1 '$2' holds a comma, quote or newline, which sbatch --export cannot carry; rename it." >&2
      exit 2 ;;
  esac
}
plain MATRIX "$matrix"
plain ROOT "$root"
plain WORKBENCH "$WORKBENCH"
mkdir -p "$root"
arrays=()
for spec in "$@"; do
  IFS=: read -r target partition workbench <<<"$spec"
  workbench=${workbench:-$WORKBENCH}
  plain TARGET "$target"
  plain WORKBENCH "$workbench"
  options=(--parsable --chdir="$root")
  if [ -n "$target" ]; then
    count=$("$workbench" matrix "$matrix" --count --target "$target")
  else
    count=$("$workbench" matrix "$matrix" --count)
  fi
  if [ -n "$partition" ]; then
    options+=(--partition="$partition")
  fi
  array=$(sbatch "${options[@]}" --array="0-$((count - 1))%$at_once" \
    --export="ALL,WORKBENCH=$workbench,WORKBENCH_MATRIX=$matrix,WORKBENCH_ROOT=$root,WORKBENCH_TARGET=$target" \
    "$here/workbench-array.sbatch")
  arrays+=("$array")
  echo "array job $array (${target:-every} target: $count items, at most $at_once at once)"
done
after=$(IFS=:; echo "${arrays[*]}")
collect=$(sbatch --parsable --dependency="afterany:$after" --chdir="$root" \
  --export="ALL,WORKBENCH=$WORKBENCH,WORKBENCH_ROOT=$root" "$here/workbench-collect.sbatch")
echo "collect job after every array: $collect"
