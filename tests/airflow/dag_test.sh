#!/usr/bin/env bash
# The fleet DAG run by a real Airflow: deploy/airflow/workbench_matrix_dag.py is parsed from a
# dags folder, `airflow dags test` runs its mapped item tasks (one per matrix item, each a real
# `workbench run --matrix`) and the collect task in one process on a SQLite database, and the
# dashboard is then checked. Airflow lives in its own virtualenv (AIRFLOW_VENV): it pins its
# own SQLAlchemy, pydantic and FastAPI, which the workbook's environment has no need for.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
airflow="${AIRFLOW_VENV:?set AIRFLOW_VENV to the virtualenv with apache-airflow}/bin/airflow"
work=$(mktemp -d /tmp/workbench-airflow.XXXXXX)
trap 'rm -rf "$work"' EXIT

export AIRFLOW_HOME="$work/home"
export AIRFLOW__CORE__DAGS_FOLDER="$repo/deploy/airflow"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export WORKBENCH="$repo/.venv/bin/workbench"
export WORKBENCH_MATRIX="$repo/tests/airflow/fleet.yaml"
export WORKBENCH_ROOT="$work/root"
export WORKBENCH_QUEUES="cpu=default"

echo "airflow: $("$airflow" version 2>/dev/null | tail -1), database in $AIRFLOW_HOME"
"$airflow" db migrate >"$work/migrate.log" 2>&1 || { tail -20 "$work/migrate.log" >&2; exit 1; }
if ! "$airflow" dags test workbench_matrix >"$work/dags-test.log" 2>&1; then
  tail -40 "$work/dags-test.log" >&2
  # A DAG file that does not import shows up as a missing DAG: say why.
  "$airflow" dags list-import-errors >&2 2>/dev/null || true
  exit 1
fi
"$repo/.venv/bin/python" - "$work/root" "$work/dags-test.log" <<'PY'
import json
import re
import sys
from pathlib import Path

root, log = Path(sys.argv[1]), Path(sys.argv[2]).read_text()
assert re.search(r"DagRun Finished: dag_id=workbench_matrix, .*state=success", log), "run failed"
mapped = set(re.findall(r"workbench_matrix\.item_cpu \S+ map_index=(\d+)", log))
assert mapped == {"0", "1"}, f"one mapped task per matrix item, got {sorted(mapped)}"
assert "workbench_matrix.collect" in log, "the collect task ran"
print(f"airflow: ran item_cpu map_index {', '.join(sorted(mapped))}, then collect: dag run success")
dashboard = json.loads((root / "matrix.json").read_text())
items = {item["name"]: item for item in dashboard["items"]}
assert set(items) == {"seed-mlp-cpu", "tiny-cnn-cpu"}, items
for name, item in items.items():
    assert item["state"] == "complete" and item["exit_code"] == 0, (name, item)
    assert (root / item["run"] / "00_environment.html").is_file(), name
print(f"airflow: dashboard checked: fleet verdict {dashboard['verdict']}; {dashboard['headline']}")
PY
