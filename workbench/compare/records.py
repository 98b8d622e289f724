"""What a comparison found: one Change per metric, the runs compared, and compare.json's shape."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal

REGRESSION: Final = "regression"
IMPROVEMENT: Final = "improvement"
WITHIN_GATE: Final = "within gate"  # moved less than the magnitude gate, and nothing could hide
# Beyond the gate, inside a noise level the runs measured (a history's prediction interval).
WITHIN_NOISE: Final = "within measured noise"
# Beyond the gate, and no measured noise level can tell it from noise (a pair cannot measure
# run-to-run variation, a loaded machine, one value per run): what would settle it is named.
INCONCLUSIVE: Final = "inconclusive"
CHANGED: Final = "changed"  # a setting or a set that differs, neither better nor worse
UNCHANGED: Final = "unchanged"
NOT_COMPARABLE: Final = "not comparable"  # missing on one side, or measured with other threads
REPORTED: Final = "shown, not gated"  # by rule never judged (one slowest step is not a measure)
REMEASURED: Final = "replaced by the remeasure"  # --remeasure timed it again; its verdict stands
ONE_SIDE: Final = "on one side only"  # a notebook that ran in one of the two runs, not both
# What a comparison says of one metric, one definition.
ChangeStatus = Literal[
    "regression",
    "improvement",
    "within gate",
    "within measured noise",
    "inconclusive",
    "changed",
    "unchanged",
    "not comparable",
    "shown, not gated",
    "replaced by the remeasure",
    "on one side only",
]


@dataclass(frozen=True)
class Gates:
    """When a change is real: beyond its magnitude gate AND, where raw samples exist, a rank
    test below `p_value` (as asv and Pinpoint require both)."""

    step_time: float = 0.05  # steady-state time and throughput
    compile_time: float = 0.15  # first call, which carries tracing and compilation
    memory: float = 0.10  # peak host and device memory
    p_value: float = 0.01


@dataclass
class Change:
    area: str  # timing | coverage | numerics | scorecard | retuning | cost
    name: str
    base: Any
    new: Any
    status: ChangeStatus
    unit: str = ""
    ratio: float | None = None  # new / base
    p_value: float | None = None
    gate: float | None = None
    note: str = ""  # how it was judged, and an environment change that may explain it
    series: list[float | None] = field(default_factory=list)  # one value per run, oldest first

    def line(self) -> str:
        """One console line: what, base -> new, by how much, with the evidence."""
        text = f"{self.status}: {self.area} {self.name}: {_fmt(self.base)} -> {_fmt(self.new)}"
        text += f" {self.unit}" if self.unit else ""
        if self.ratio is not None:
            text += f" ({self.ratio - 1:+.1%}"
            text += f", p={self.p_value:.2g}" if self.p_value is not None else ""
            text += ")"
        return text + (f"; {self.note}" if self.note else "")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "none" if value is None else str(value)


@dataclass
class RunInfo:
    label: str
    path: str
    started_at: str
    workload: str
    target: str
    verdict: str | None
    versions: dict[str, str]


@dataclass
class Comparison:
    mode: str  # "pair": NEW against BASE; "history": the newest against the runs before it
    runs: list[RunInfo]
    baseline: str  # what the newest run was judged against, in words
    gates: Gates
    changes: list[Change]
    environment: list[dict[str, Any]]  # what 00 recorded as changed between baseline and newest
    cost: list[dict[str, Any]]  # per run: what a sample cost on the hardware it ran on
    cost_note: str
    skipped: list[str]  # run folders that could not be read

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.status == REGRESSION]

    @property
    def inconclusive(self) -> list[Change]:
        return [c for c in self.changes if c.status == INCONCLUSIVE]

    @property
    def improvements(self) -> list[Change]:
        return [c for c in self.changes if c.status == IMPROVEMENT]

    def with_status(self, status: ChangeStatus) -> list[Change]:
        return [c for c in self.changes if c.status == status]

    def headline(self) -> str:
        newest = self.runs[-1]
        text = f"{newest.label} against {self.baseline}: "
        if self.regressions:
            worst = self.regressions[0]
            text += f"{len(self.regressions)} regression(s), first {worst.area} {worst.name}"
            if worst.ratio is not None:
                text += f" ({worst.ratio - 1:+.1%})"
        else:
            text += "no regression"
        for side in ("baseline", "newest run"):
            names = [c.name for c in self.with_status(ONE_SIDE) if c.note.startswith(side)]
            if names:
                text += f"; not compared, in the {side} only: {', '.join(names)}"
        if self.inconclusive:
            text += (
                f"; {len(self.inconclusive)} inconclusive (beyond the gate, not beyond the noise "
                "it can measure)"
            )
        if self.improvements:
            text += f"; {len(self.improvements)} improvement(s)"
        if self.environment:
            text += f"; {len(self.environment)} environment change(s) recorded by 00"
        return text + "."


def comparison_data(comparison: Comparison) -> dict[str, Any]:
    """compare.json: headline first, then every change with its evidence."""
    return {
        "headline": comparison.headline(),
        "mode": comparison.mode,
        "baseline": comparison.baseline,
        "regressions": len(comparison.regressions),
        "gates": asdict(comparison.gates),
        "runs": [asdict(r) for r in comparison.runs],
        "changes": [asdict(c) for c in comparison.changes],
        "environment": comparison.environment,
        "cost": comparison.cost,
        "cost_note": comparison.cost_note,
        "skipped": comparison.skipped,
    }
