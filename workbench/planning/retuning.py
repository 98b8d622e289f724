"""The plan as notebook 04 makes it: for the workload the notebook retunes, on the instance the
run is on (or the one `plan_instance` names), for the global batch the notebook plans for.

The plan is made before the trials, from the workload as 04 loaded it (an hf: checkpoint from
its config at 04's sequence length), so a model that one core cannot hold is answered before
any trial runs out of memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from workbench.environment.instance import resolve_instance_type
from workbench.planning.instances import DEFAULT_INSTANCE, INSTANCES
from workbench.planning.layouts import GLOO_LAYERS_IN_FLIGHT, NONE, PRECISIONS, Layout, rank_memory
from workbench.planning.planner import Plan, make_plan
from workbench.workload import Workload, WorkloadSpec
from workbench.workloads import HF_PREFIX


class RetuningPlanSettings(Protocol):
    """The settings of notebook 04 the plan reads (tuning's RetuneSettings has them): the
    planner stays below the notebook that shows its plan."""

    @property
    def plan_instance(self) -> str: ...
    @property
    def instance_type(self) -> str: ...
    @property
    def global_batch(self) -> int: ...
    @property
    def reference_global_batch(self) -> int: ...


def instance_for_run(plan_instance: str, instance_type: str) -> tuple[str, str]:
    """The instance to plan for, and why: the parameter; else the instance this runs on (04's
    instance_type, else EC2's metadata) where the planner knows it; else DEFAULT_INSTANCE."""
    if plan_instance:
        return plan_instance, "the plan_instance parameter"
    found = resolve_instance_type(instance_type)
    if found.name in INSTANCES:
        return found.name, f"the instance this notebook runs on ({found.source})"
    why = (
        f"this machine is {found.name} ({found.source}), not an instance type the planner knows"
        if found.name
        else f"this machine's instance type is unknown: {found.source}"
    )
    return DEFAULT_INSTANCE, f"{DEFAULT_INSTANCE}, the default, since {why}"


def plan_for_retuning(
    spec: WorkloadSpec, workload: Workload, settings: RetuningPlanSettings
) -> Plan:
    """The plan for notebook 04 (module docstring). A global batch the chosen layout's data
    parallelism does not divide leaves the plan without a batch split, and says why."""
    instance, reason = instance_for_run(settings.plan_instance, settings.instance_type)
    hf = spec.spec.startswith(HF_PREFIX)
    notes = []
    if hf and spec.hf_config:
        notes.append(
            f"the plan reads the checkpoint's config.json as it is: hf_config {spec.hf_config!r} "
            "is not applied to it"
        )
    return make_plan(
        spec.spec if hf else workload,
        instance,
        seq_len=workload.sequence_length if hf else None,
        global_batch=settings.global_batch
        or settings.reference_global_batch
        or workload.batch_size,
        instance_reason=reason,
        notes=notes,
        strict_batch=False,
    )


@dataclass(frozen=True)
class TrialBeside:
    """One measured trial and the planner's prediction for the same step on one process."""

    batch: int
    measured_bytes: int
    predicted_bytes: float


def beside_trials(plan: Plan, trials: list[tuple[int, int | None]]) -> list[TrialBeside]:
    """The planner's peak for one process of this machine, in fp32 as the trials run, at each
    measured trial's batch ((batch, measured peak bytes); trials without a peak are left out).
    Empty where the plan has no model shape (read back from a result file)."""
    if plan.shape is None:
        return []
    # One row per batch: the last trial at it (the sweep's, after the search's).
    latest = {batch: measured for batch, measured in trials if measured}
    rows = []
    for batch, measured in sorted(latest.items()):
        predicted = rank_memory(
            plan.shape,
            plan.activations,
            Layout(1, 1, 1, NONE, False),
            PRECISIONS["fp32"],
            batch,
            plan.seq,
            layers_in_flight=GLOO_LAYERS_IN_FLIGHT,
        ).peak
        rows.append(TrialBeside(batch, measured, predicted))
    return rows


def per_sample(rows: list[TrialBeside]) -> tuple[float, float] | None:
    """(predicted, measured) bytes each extra sample adds, between the smallest and the largest
    batch: what a process holds besides the model's tensors (the interpreter, torch's libraries)
    cancels out of the difference; None with fewer than two batches."""
    if len(rows) < 2:
        return None
    low, high = rows[0], rows[-1]
    samples = high.batch - low.batch
    return (
        (high.predicted_bytes - low.predicted_bytes) / samples,
        (high.measured_bytes - low.measured_bytes) / samples,
    )
