"""Notebook 04, run against run: the recommended settings side by side, and what a sample cost
on the hardware each run measured (never a price for hardware a run did not run on)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workbench.compare.records import CHANGED, UNCHANGED, Change
from workbench.compare.runs import Run
from workbench.compare.timing import configs_of, steady_samples
from workbench.timing import early_stopping_estimate
from workbench.tuning.cost import MEASURED
from workbench.tuning.reader import RESULT_FILE as RETUNING_FILE
from workbench.tuning.records import Recommendation

# The recommended settings compared side by side, each with how to read it off a recommendation.
KNOBS: tuple[tuple[str, Callable[[Recommendation], int | None]], ...] = (
    ("per core batch", lambda r: r.per_core_batch),
    ("accumulation steps", lambda r: r.accumulation_steps),
    ("world size", lambda r: r.world_size),
    ("dataloader workers", lambda r: r.dataloader_workers),
)


def retuning_changes(base_run: Run, new_run: Run) -> list[Change]:
    base, new = base_run.result(RETUNING_FILE), new_run.result(RETUNING_FILE)
    if base is None or new is None:
        return []
    changes = []
    for name, read in KNOBS:
        before, now = read(base.recommendation), read(new.recommendation)
        changes.append(
            Change("retuning", name, before, now, UNCHANGED if before == now else CHANGED)
        )
    return changes


def _infer_p99(run: Run) -> float | None:
    """The inference p99, only where a configuration has the steps to support one, as LoadGen's
    early-stopping estimate (timing.TAIL_SOURCE): fewer steps cannot show a p99, and the slowest
    step is not one."""
    tails = [
        tail
        for (kind, _), c in configs_of(run).items()
        if kind == "infer"
        and (tail := early_stopping_estimate(sorted(steady_samples(c)), 0.99)) is not None
    ]
    return min(tails) if tails else None


def cost_row(run: Run) -> dict[str, Any]:
    """What one run measured about cost: rate, price if its instance is known, tail latency."""
    data = run.result(RETUNING_FILE)
    cost = data.cost if data else None
    measured = next((r for r in cost.rows if r.basis == MEASURED), None) if cost else None
    row: dict[str, Any] = {
        "run": run.label,
        "target": run.target,
        "instance": None,
        "usd_per_hour": None,
        "items_per_second": None,
        "items_per_dollar": None,
        "hours_for_items": None,
        "items": cost.items if cost else None,
        "unit": cost.unit if cost else None,
        "infer_p99_s": _infer_p99(run),
    }
    if measured:
        row.update(
            instance=measured.instance,
            usd_per_hour=measured.usd_per_hour,
            items_per_second=measured.items_per_second,
            items_per_dollar=measured.items_per_dollar,
            hours_for_items=measured.hours_for_items,
        )
    return row


def ran_on_trainium(run: Run) -> bool:
    """What the run's own result files say about its device (a CPU run of the XLA path is not)."""
    return bool(run.on_trainium)


def cost_note(rows: list[dict[str, Any]], on_trainium: list[bool]) -> str:
    priced = [r for r in rows if r["items_per_dollar"]]
    if not any(on_trainium):
        return (
            "No run here ran on Trainium, so no Trainium cost can be known from them: a cost "
            "comparison needs a run on the Trainium instance itself."
        )
    if len(priced) < 2:
        return (
            "Samples per dollar need each run's instance type and its price: set "
            "-p instance_type= where the instance metadata is not reachable, and a price table."
        )
    first, last = priced[0], priced[-1]
    ratio = last["items_per_dollar"] / first["items_per_dollar"]
    return (
        f"{last['run']} gets {ratio:.2f}x the samples per dollar of {first['run']} "
        f"({last['instance']} against {first['instance']}), each measured on its own hardware."
    )
