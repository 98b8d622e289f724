"""Airflow 2.3+ DAG: every matrix item as one mapped task, then one collect task.

Dynamic task mapping (`.partial().expand()`) makes one task instance per item; the matrix file
decides how many, so adding a model to the file adds a task on the next parse. Each instance
runs `workbench run --matrix FILE --index N` on a worker that can reach the target (a Trn1 or
Trn2 worker queue; one DAG per target, since the two stacks need different images). The collect
task runs whatever happened to the items (trigger_rule all_done) and builds the dashboard.

Exit codes 1 to 5 are findings about the model, not flakes: tasks are not retried.

Settings (environment of the scheduler and workers): WORKBENCH_MATRIX (the matrix file),
WORKBENCH_ROOT (the folder every item writes under), WORKBENCH (the command, default
`workbench`), WORKBENCH_QUEUE (the worker queue with Neuron devices).
"""

from __future__ import annotations

import os
from pathlib import Path

import pendulum
import yaml
from airflow import DAG
from airflow.operators.bash import BashOperator

MATRIX = os.environ.get("WORKBENCH_MATRIX", "/opt/workbook/matrix.yaml")
ROOT = os.environ.get("WORKBENCH_ROOT", "/fsx/workbench/nightly-trn1")
WORKBENCH = os.environ.get("WORKBENCH", "workbench")
QUEUE = os.environ.get("WORKBENCH_QUEUE", "trn1")


def matrix_indexes(path: str) -> list[str]:
    """The items' indexes, read at parse time with nothing but YAML (no torch import): the
    workers check every item fully when they run it."""
    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return []
    items = document.get("items") if isinstance(document, dict) else None
    return [str(index) for index in range(len(items))] if isinstance(items, list) else []


with DAG(
    dag_id="workbench_matrix_trn1",
    schedule="0 2 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 0},
    tags=["workbench", "trainium"],
) as dag:
    items = BashOperator.partial(
        task_id="item",
        queue=QUEUE,
        max_active_tis_per_dag=4,  # items running at once (each holds its NeuronCores)
        append_env=True,
        bash_command=f"{WORKBENCH} run --matrix {MATRIX} --index $ITEM_INDEX --out {ROOT}",
    ).expand(env=[{"ITEM_INDEX": index} for index in matrix_indexes(MATRIX)])

    collect = BashOperator(
        task_id="collect",
        trigger_rule="all_done",
        bash_command=f"{WORKBENCH} collect {ROOT}",
    )

    items >> collect
