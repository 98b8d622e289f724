"""Where a run's numbers first stop being finite: the step, and the first NaN/Inf tensor.

A run whose loss turns NaN or Inf is replayed (every run is seeded, so the replay computes the
same values) with a check after every tensor the training loop produces, in the order it
produces them: each leaf module's output in the forward, the loss, each parameter's gradient,
and each parameter after the optimizer update. The first one that holds a NaN or Inf is named.
Only failing runs pay for the replay and its device synchronizations. Under loss scaling
(fp16 autocast, torch.amp.GradScaler) an overflowed gradient is how the scaler finds its scale:
it skips that step and changes no weight, so gradients are not named there; a NaN loss or
parameter still is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from workbench.numerics.capture import (
    RunSpec,
    TrainingLoop,
    float_tensors,
    leaf_modules,
    normalize_name,
)
from workbench.numerics.run_records import NonFinite as NonFinite
from workbench.numerics.run_records import first_nonfinite_step as first_nonfinite_step
from workbench.workload import Inputs, call_model


def _finite(tensor: torch.Tensor) -> bool:
    return bool(torch.isfinite(tensor).all())


def find_first_nonfinite(
    model: nn.Module,
    inputs: Inputs,
    targets: torch.Tensor,
    spec: RunSpec,
    loop: TrainingLoop,
) -> NonFinite:
    """Replay the trajectory of the placed `model` (fresh initial weights) up to its first
    NaN/Inf loss, checking every tensor in the order training computes it."""
    found: list[tuple[str, str]] = []  # (tensor, where): only the first is kept
    current = {"step": 0}
    # Hooks inside a compiled graph would break it; a compiled replay names graph-level tensors.
    handles = [] if spec.compiled else _watch_layers(model, found, current)
    try:
        first_step, first_loss = _replay(model, inputs, targets, spec, loop, found, current)
    finally:
        for handle in handles:
            handle.remove()
    if not found:
        return NonFinite(first_step, first_loss, None, "none found when the run was replayed")
    return NonFinite(first_step, first_loss, *found[0])


def _watch_layers(
    model: nn.Module, found: list[tuple[str, str]], current: dict[str, int]
) -> list[RemovableHandle]:
    """A forward hook on every leaf that names the first leaf whose output is not finite."""
    handles = []
    for name, module in leaf_modules(model):

        def check(module: nn.Module, _args: Any, output: Any, name: str = name) -> None:
            if not found and not all(_finite(t) for t in float_tensors(output)):
                layer = f"layer {normalize_name(name)} ({type(module).__name__})"
                found.append((layer, f"{layer}, in the forward of step {current['step']}"))

        handles.append(module.register_forward_hook(check))
    return handles


def _replay(
    model: nn.Module,
    inputs: Inputs,
    targets: torch.Tensor,
    spec: RunSpec,
    loop: TrainingLoop,
    found: list[tuple[str, str]],
    current: dict[str, int],
) -> tuple[int | None, float | None]:
    """The training loop with a check after each tensor; the first NaN/Inf loss's step and
    value, or (None, None) when every loss stays finite."""
    optimizer = loop.make_optimizer(model)
    scaler = spec.grad_scaler()
    forward = spec.forward_of(model)
    spec.target.manual_seed(loop.seed)
    for step in range(1, loop.steps + 1):
        current["step"] = step
        optimizer.zero_grad(set_to_none=True)
        with spec.autocast():
            outputs = call_model(forward, inputs)
            loss = loop.loss_fn(outputs, targets)
        if not found and not all(_finite(t) for t in float_tensors(outputs)):
            found.append(("the outputs", f"the outputs, in the forward of step {step}"))
        loss_value = float(loss.detach().float())
        if not math.isfinite(loss_value):
            if not found:
                found.append(("the loss", f"the loss of step {step}"))
            return step, loss_value
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        if not scaler.is_enabled():
            gradients = ((n, p.grad) for n, p in model.named_parameters())
            _name_first_nonfinite(
                gradients, found, "gradient of", f"in the backward of step {step}"
            )
        scaler.step(optimizer)
        scaler.update()
        updated = ((n, p.detach()) for n, p in model.named_parameters())
        _name_first_nonfinite(
            updated, found, "parameter", f"after the optimizer update of step {step}"
        )
        spec.target.synchronize()
    return None, None


def _name_first_nonfinite(
    tensors: Iterable[tuple[str, torch.Tensor | None]],
    found: list[tuple[str, str]],
    what: str,
    when: str,
) -> None:
    """Name the first of the parameters' `tensors` that is not finite, unless something earlier
    already was; a parameter without one (None: no gradient) is passed over."""
    for name, tensor in tensors:
        if found:
            return
        if tensor is not None and not _finite(tensor):
            named = f"{what} {normalize_name(name)}"
            found.append((named, f"{named}, {when}"))
