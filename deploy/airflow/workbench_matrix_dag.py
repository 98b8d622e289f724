"""Airflow DAG (3.x, and 2.3 or newer): every matrix item as one mapped task, per target, then
one collect task.

Dynamic task mapping (`.partial().expand()`) makes one task instance per item; the matrix file
decides how many, so adding a model to the file adds a task on the next parse. Each target gets
its own mapped task on its own worker queue (Trn1 on the XLA stack and Trn2 native need
different images), and each instance runs `workbench run --matrix FILE --target T --index N`,
N counting only that target's items. Every target writes into one ROOT; the collect task runs
whatever happened to the items (trigger_rule all_done) and builds the one dashboard.

Retries: Airflow's own `retries` cannot tell exit codes apart, and exit codes 1 to 5 are
findings about the model, not flakes, so it stays 0. The task's command itself runs the item
once more when the workbook was killed (exit 137 or 143) and its shell was not; the second exit
code is the task's. Nothing else is retried (130, an interrupted run, included).

Settings (environment of the scheduler and workers): WORKBENCH_MATRIX (the matrix file),
WORKBENCH_ROOT (the folder every item writes under), WORKBENCH (the command, default
`workbench`), WORKBENCH_QUEUES (target=queue pairs, default `xla=trn1,neuron=trn2`: the worker
queue with that target's Neuron devices; a target of the matrix left out is not run, and its
items show as missing on the dashboard).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pendulum
import yaml

try:  # Airflow 3: the Task SDK and the standard provider
    from airflow.providers.standard.operators.bash import BashOperator
    from airflow.sdk import DAG
except ImportError:  # Airflow 2.3 to 2.x
    from airflow import DAG
    from airflow.operators.bash import BashOperator

MATRIX = os.environ.get("WORKBENCH_MATRIX", "/opt/workbook/matrix.yaml")
ROOT = os.environ.get("WORKBENCH_ROOT", "/fsx/workbench/nightly")
WORKBENCH = os.environ.get("WORKBENCH", "workbench")
QUEUES = dict(
    pair.strip().split("=", 1)
    for pair in os.environ.get("WORKBENCH_QUEUES", "xla=trn1,neuron=trn2").split(",")
    if "=" in pair
)

# Every operator-supplied value enters a bash command quoted: a path holding `;` or spaces is
# one word, never a second command. The item's target and index come from the environment.
_WORKBENCH, _MATRIX, _ROOT = (shlex.quote(value) for value in (WORKBENCH, MATRIX, ROOT))

# One item; once more if the workbook was killed (137 SIGKILL, 143 SIGTERM), never otherwise.
RUN_ITEM = (
    "for attempt in 1 2; do "
    f'{_WORKBENCH} run --matrix {_MATRIX} --target "$ITEM_TARGET" --index "$ITEM_INDEX" '
    f"--out {_ROOT}; "
    "status=$?; "
    'if [ "$attempt" = 1 ] && { [ "$status" = 137 ] || [ "$status" = 143 ]; }; then '
    'echo "item killed (exit $status): running it once more" >&2; continue; fi; '
    'exit "$status"; done'
)


def matrix_indexes(path: str, target: str) -> list[str]:
    """The indexes `--target` gives the target's items (0, 1, ...), read at parse time with
    nothing but YAML (no torch import): the workers check every item fully when they run it."""
    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return []
    if not isinstance(document, dict) or not isinstance(document.get("items"), list):
        return []
    defaults = document.get("defaults")
    default = defaults.get("target", "auto") if isinstance(defaults, dict) else "auto"
    targets = [
        str(item.get("target", default)) for item in document["items"] if isinstance(item, dict)
    ]
    return [str(index) for index in range(targets.count(target))]


with DAG(
    dag_id="workbench_matrix",
    schedule="0 2 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 0},
    tags=["workbench", "trainium"],
) as dag:
    collect = BashOperator(
        task_id="collect",
        trigger_rule="all_done",
        bash_command=f"{_WORKBENCH} collect {_ROOT}",
    )
    for target, queue in QUEUES.items():
        items = BashOperator.partial(
            task_id=f"item_{target}",
            queue=queue,
            max_active_tis_per_dag=4,  # items running at once (each holds its NeuronCores)
            append_env=True,
            bash_command=RUN_ITEM,
        ).expand(
            env=[
                {"ITEM_TARGET": target, "ITEM_INDEX": index}
                for index in matrix_indexes(MATRIX, target)
            ]
        )
        items >> collect
