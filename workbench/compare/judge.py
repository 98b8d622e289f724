"""Judging the newest run against the ones before it: every area's changes, the runs compared,
and the cost rows; compare_runs is what `workbench compare` and the fleet's collect call."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from workbench.compare.coverage import coverage_changes
from workbench.compare.environment import environment_changes, environment_note
from workbench.compare.numerics import numerics_changes
from workbench.compare.records import ONE_SIDE, Change, Comparison, Gates, RunInfo
from workbench.compare.retuning import cost_note, cost_row, ran_on_trainium, retuning_changes
from workbench.compare.runs import Run, collect_runs
from workbench.compare.serving import serving_changes
from workbench.compare.timing import timing_changes
from workbench.compare.verdicts import verdict_changes
from workbench.environment.reader import RESULT_FILE as ENVIRONMENT_FILE
from workbench.errors import BadInput

VERSION_KEYS = ("torch", "torch-neuronx", "torch-xla", "neuronx-cc", "workbench")


def _run_info(run: Run) -> RunInfo:
    environment = run.result(ENVIRONMENT_FILE)
    packages = environment.packages if environment else {}
    versions = {k: packages[k] for k in VERSION_KEYS if k in packages}
    return RunInfo(
        run.label,
        str(run.path),
        run.started_at,
        run.workload,
        run.target,
        run.summary.verdict.status if run.summary.verdict else None,
        versions,
    )


def _notebooks_run(run: Run) -> list[str]:
    return [e.notebook for e in run.summary.notebooks if e.result]


def one_side_changes(earlier: list[Run], newest: Run) -> list[Change]:
    """Every notebook that wrote a result on one side only (a run with --only, or a notebook
    that failed before saving): nothing of it is compared, and the headline names it."""
    before = {name for run in earlier for name in _notebooks_run(run)}
    now = set(_notebooks_run(newest))
    changes = []
    for notebook in sorted(before ^ now):
        side = "newest run" if notebook in now else "baseline"
        note = f"{side} only: nothing of it is compared"
        ran = "ran" if notebook in before else "no result"
        changes.append(
            Change(
                "notebooks", notebook, ran, "ran" if notebook in now else "no result", ONE_SIDE,
                note=note,
            )
        )  # fmt: skip
    return changes


def compare_runs(
    paths: Sequence[str | Path],
    gates: Gates | None = None,
    allow_different_workloads: bool = False,
) -> Comparison:
    """Read the runs and judge the newest against the ones before it; BadInput says what is
    wrong with the input in one sentence."""
    gates = gates or Gates()
    runs, skipped = collect_runs(paths)
    if len(runs) < 2:
        found = f"{len(runs)} readable run" + ("" if len(runs) == 1 else "s")
        raise BadInput(
            f"compare needs at least two readable runs; found {found}"
            + (f" ({len(skipped)} skipped: {skipped[0]})" if skipped else "")
            + "."
        )
    workloads = sorted({run.workload for run in runs})
    if len(workloads) > 1 and not allow_different_workloads:
        raise BadInput(
            f"the runs are of different workloads ({', '.join(workloads)}); compare runs of one "
            "workload, or pass --allow-different-workloads to compare them anyway."
        )
    base, new = runs[-2], runs[-1]
    environment = environment_changes(base, new)
    changes: list[Change] = one_side_changes(runs[:-1], new)
    changes += verdict_changes(base, new)
    changes += timing_changes(runs, gates, environment_note(environment))
    changes += coverage_changes(base, new)
    changes += numerics_changes(runs)
    changes += retuning_changes(base, new)
    changes += serving_changes(runs, gates)
    if len(runs) == 2:
        baseline = base.label
        mode = "pair"
    else:
        baseline = f"the {len(runs) - 1} runs before it (timings: their median)"
        mode = "history"
    rows = [cost_row(run) for run in runs]
    return Comparison(
        mode,
        [_run_info(run) for run in runs],
        baseline,
        gates,
        changes,
        environment,
        rows,
        cost_note(rows, [ran_on_trainium(run) for run in runs]),
        skipped,
    )
