"""Notebook 03 for a `script:` workload: the script's own loop on the reference and on the target.

The script is run twice, unmodified and watched (workloads/script.py), each from the same seed
and stopped after the trajectory's step count: once on the reference (the CPU, fp32 eager, as
every reference run) and once on the target. Its losses (the value `backward` was called on at
each step) form two trajectories, judged by the rule that judges every workload's trajectory:
tensors.compare_tensor with the run's VerdictRule, at the dtype the script's loss has. There is
no fp64 run of a script (it runs in its own dtype), so beyond closeness the yardstick is the
spread the reference measured for the captured model's trajectory over the same steps: its two
runs' difference, or its sensitivity to weights one ulp away, whichever is larger.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.numerics.metrics import VerdictRule, judge
from workbench.numerics.records import TensorComparison
from workbench.numerics.references import ReferenceRuns
from workbench.numerics.tensors import compare_tensor
from workbench.targets import get_target
from workbench.targets.base import Target
from workbench.workload import Workload

REFERENCE_LABEL = "cpu fp32 eager"
YARDSTICK_SOURCE = (
    "the reference's spread on the captured model's trajectory over the same steps (two runs, "
    "or weights one ulp away)"
)


@dataclass
class ScriptLoop:
    """The script's own loss trajectory on the reference and on the target, and the verdict."""

    target_label: str
    steps_asked: int
    reference_losses: list[float]
    target_losses: list[float]
    loss_dtype: str
    trajectory: TensorComparison | None  # None when either run recorded no loss
    yardstick: str = YARDSTICK_SOURCE

    @property
    def compared_steps(self) -> int:
        return min(len(self.reference_losses), len(self.target_losses))

    @property
    def passed(self) -> bool:
        return self.trajectory is not None and self.trajectory.verdict.passed

    def sentence(self) -> str:
        """The verdict in words, with what was compared."""
        runs = (
            f"the script's own loop, {self.compared_steps} step(s) on {self.target_label} "
            f"against {REFERENCE_LABEL}, same seed"
        )
        if self.trajectory is None:
            return f"{runs}: not compared (a run recorded no loss)"
        short = (
            f" (its loop ran {self.compared_steps} of the {self.steps_asked} steps asked)"
            if self.compared_steps < self.steps_asked
            else ""
        )
        verdict = self.trajectory.verdict
        return f"{runs}{short}: {'pass' if verdict.passed else 'FAIL'}, {verdict.reason}"


def _losses(workload: Workload, target: Target, steps: int) -> tuple[list[float], torch.dtype]:
    # Imported here: the script workload module pulls in the device redirection.
    from workbench.workloads.script import run_script

    capture, _ = run_script(workload.spec, target, steps=steps)
    return capture.losses[:steps], capture.loss_dtype or torch.float32


def trajectory_yardstick(refs: ReferenceRuns) -> float | None:
    """The reference's spread on the captured model's trajectory: its two runs' difference or
    its sensitivity to weights one ulp away, the larger; None where both are zero."""
    spreads = [refs.spread.get(("trajectory", "losses")) or 0.0]
    if refs.sensitivity is not None:
        spreads.append(refs.sensitivity.rmse)
    return max(spreads) or None


def judge_loop(loop: ScriptLoop, rule: VerdictRule, spread: float | None) -> None:
    """loop.trajectory from its two loss lists, over the steps both ran."""
    count = loop.compared_steps
    if count == 0:
        return
    dtype = getattr(torch, loop.loss_dtype)
    # Each loss was a value of its dtype: rebuilt in it, the rule judges it at its tolerances.
    loop.trajectory = compare_tensor(
        "script loop trajectory",
        "trajectory",
        torch.tensor(loop.target_losses[:count], dtype=torch.float64).to(dtype),
        torch.tensor(loop.reference_losses[:count], dtype=torch.float64).to(dtype),
        None,
        rule,
    )
    if spread:
        # Judged again with the yardstick named, as a workload's trajectory is widened.
        metrics = loop.trajectory.metrics
        metrics.reference_spread, metrics.spread_source = spread, YARDSTICK_SOURCE
        loop.trajectory.verdict = judge(metrics, rule)


def compare_script_loop(
    workload: Workload, target: Target, steps: int, rule: VerdictRule, spread: float | None
) -> ScriptLoop | None:
    """The script's loop on the CPU reference and on `target`, judged with `spread` as its
    yardstick beyond closeness (trajectory_yardstick); None for a workload that is not a
    script."""
    if workload.script_run is None:
        return None
    reference = _losses(workload, get_target("cpu"), steps)
    on_target = _losses(workload, target, steps)
    loop = ScriptLoop(
        target_label=f"{target.name} (the script's own dtype and mode)",
        steps_asked=steps,
        reference_losses=reference[0],
        target_losses=on_target[0],
        loss_dtype=str(on_target[1]).removeprefix("torch."),
        trajectory=None,
    )
    judge_loop(loop, rule, spread)
    return loop
