"""Notebook 04, run against run: the recommended settings side by side, and what a sample cost
on the hardware each run measured (never a price for hardware a run did not run on)."""

from __future__ import annotations

from typing import Any

from workbench.compare.records import CHANGED, UNCHANGED, Change
from workbench.compare.runs import Run
from workbench.compare.timing import configs_of, steady_samples
from workbench.safe_load import Shape
from workbench.timing import quantile, samples_for_percentile

RETUNING_NOTEBOOK = "04_retuning"
KNOBS = ("per_core_batch", "accumulation_steps", "world_size", "dataloader_workers")
_COST_ROW = {
    "basis": (str, None),
    "instance": (str, None),
    **dict.fromkeys(
        ("usd_per_hour", "items_per_second", "items_per_dollar", "hours_for_items"), (float, None)
    ),
}
DATA_SHAPE: Shape = {
    "recommendation": (dict.fromkeys(KNOBS, (int, None)), None),
    "cost": ({"items": (float, None), "unit": (str, None), "rows": [_COST_ROW]}, None),
}


def retuning_changes(base_run: Run, new_run: Run) -> list[Change]:
    base = (base_run.data(RETUNING_NOTEBOOK) or {}).get("recommendation")
    new = (new_run.data(RETUNING_NOTEBOOK) or {}).get("recommendation")
    if not base or not new:
        return []
    return [
        Change(
            "retuning",
            knob.replace("_", " "),
            base.get(knob),
            new.get(knob),
            UNCHANGED if base.get(knob) == new.get(knob) else CHANGED,
        )
        for knob in KNOBS
    ]


def _infer_p99(run: Run) -> float | None:
    """The inference p99, only where a configuration has the steps to support one (MLPerf's
    early-stopping count): fewer steps cannot show a p99, and the slowest step is not one."""
    needed = samples_for_percentile(0.99)
    tails = [
        quantile(sorted(samples), 0.99)
        for (kind, _), c in configs_of(run).items()
        if kind == "infer" and len(samples := steady_samples(c)) >= needed
    ]
    return min(tails) if tails else None


def cost_row(run: Run) -> dict[str, Any]:
    """What one run measured about cost: rate, price if its instance is known, tail latency."""
    data = run.data(RETUNING_NOTEBOOK) or {}
    cost = data.get("cost") or {}
    measured = next((r for r in cost.get("rows", []) if r.get("basis") == "measured"), None)
    row: dict[str, Any] = {
        "run": run.label,
        "target": run.target,
        "instance": None,
        "usd_per_hour": None,
        "items_per_second": None,
        "items_per_dollar": None,
        "hours_for_items": None,
        "items": cost.get("items"),
        "unit": cost.get("unit"),
        "infer_p99_s": _infer_p99(run),
    }
    if measured:
        row.update(
            instance=measured.get("instance"),
            usd_per_hour=measured.get("usd_per_hour"),
            items_per_second=measured.get("items_per_second"),
            items_per_dollar=measured.get("items_per_dollar"),
            hours_for_items=measured.get("hours_for_items"),
        )
    return row


def ran_on_trainium(run: Run) -> bool:
    """What the run's own result files say about its device (a CPU run of the XLA path is not)."""
    return any(
        bool((record.get("target") or {}).get("is_trainium")) for record in run.results.values()
    )


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
