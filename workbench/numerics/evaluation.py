"""The workload's own downstream evaluation, on the reference and on a run (AWS equivalence
stage 7: a port passes when no top-level task drops more than 2 points).

A workload names it as `Workload.downstream_eval`: a function that takes `predict` (model inputs
on the CPU, shaped as the workload's batches, in; the model's outputs in fp32 on the CPU out,
computed by the run's device, precision and compiler at the initial weights, in eval mode) and
returns a score in [0, 1], higher is better, or a mapping of task name to such a score.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from workbench.numerics.capture import RunSpec, as_fp32_cpu
from workbench.workload import Inputs, Workload

SINGLE_TASK = "score"


def predictor(
    forward: Callable[..., Any], spec: RunSpec, workload: Workload
) -> Callable[[Inputs], Any]:
    """What the evaluation function calls: the run's forward on CPU inputs, outputs back in fp32
    on the CPU."""

    def predict(inputs: Inputs) -> Any:
        with torch.no_grad(), spec.autocast():
            return as_fp32_cpu(workload.forward(forward, spec.place(inputs)))

    return predict


def scores_of(value: object) -> dict[str, float]:
    """A score or a mapping of task to score, as {task: score}; anything else is a ValueError."""
    if isinstance(value, Mapping):
        items = list(value.items())
    else:
        items = [(SINGLE_TASK, value)]
    if not items:
        raise ValueError("it returned no task score")
    scores = {}
    for task, score in items:
        if isinstance(score, bool) or not isinstance(score, (int, float, torch.Tensor)):
            raise ValueError(f"its score for {task!r} is {type(score).__name__}, not a number")
        scores[str(task)] = float(score)
    return scores


def evaluate(workload: Workload, forward: Callable[..., Any], spec: RunSpec) -> dict[str, float]:
    """The workload's evaluation through the run's forward; raises what the function raises."""
    assert workload.downstream_eval is not None
    scores = scores_of(workload.downstream_eval(predictor(forward, spec, workload)))
    return {task: score if math.isfinite(score) else math.nan for task, score in scores.items()}
