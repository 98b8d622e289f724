"""fp16 under autocast trains as torch.amp trains it: a real torch.amp.GradScaler scales the
loss, so gradients too small for fp16 survive, and a step whose scaled gradients overflow is
skipped (no weight changes) with the run's first gradients taken from the next step, the same
weights on the same batch. Real torch on the CPU throughout."""

import dataclasses
import math

import torch
from torch import nn
from torch.nn import functional as F

from workbench.numerics.capture import FP32, PRECISIONS, RunSpec, TrainingLoop, capture_training
from workbench.numerics.nonfinite import find_first_nonfinite
from workbench.targets.cpu import CpuTarget

CPU = CpuTarget()
FP16_AMP = PRECISIONS["fp16-autocast"]
# The same recipe without loss scaling: what fp16 autocast was before torch.amp's scaler.
FP16_UNSCALED = dataclasses.replace(FP16_AMP, name="fp16-autocast-unscaled", loss_scaling=False)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))


def _loop(loss_scale: float, steps: int) -> TrainingLoop:
    return TrainingLoop(
        loss_fn=lambda out, y: F.cross_entropy(out, y) * loss_scale,
        make_optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3),
        steps=steps,
    )


def _train(precision, loss_scale: float, steps: int):
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(8, 16, generator=generator)
    targets = torch.randint(4, (8,), generator=generator)
    return capture_training(
        _model(),
        (inputs,),
        targets,
        RunSpec(CPU, precision),
        _loop(loss_scale, steps),
    )


def test_the_scaler_keeps_gradients_that_fp16_alone_flushes_to_zero():
    """A loss of order 1e-7: its fp16 output gradients (~1e-9) are below fp16's smallest
    subnormal without scaling, and 65536 times larger with it."""
    scaled = _train(FP16_AMP, 1e-7, steps=1)
    unscaled = _train(FP16_UNSCALED, 1e-7, steps=1)
    reference = _train(FP32, 1e-7, steps=1)
    assert all(float(g.abs().max()) == 0.0 for g in unscaled.gradients.values())
    for name, gradient in scaled.gradients.items():
        expected = reference.gradients[name]
        assert float(gradient.abs().max()) > 0.0
        assert torch.allclose(
            gradient, expected, rtol=0.05, atol=1e-3 * float(expected.abs().max())
        )


def test_an_overflowing_step_is_skipped_and_its_gradients_retaken():
    """A loss of order 100: at the initial scale 65536 the fp16 output gradients overflow, so
    the scaler skips those steps, halving the scale each time, then trains; the first
    gradients are the finite ones, those of the same initial weights, and nothing is NaN."""
    run = _train(FP16_AMP, 100.0, steps=12)
    reference = _train(FP32, 100.0, steps=1)
    assert run.skipped_steps[0] == 1 and len(run.skipped_steps) < 12
    assert run.skipped_steps == list(range(1, len(run.skipped_steps) + 1))
    # A skipped step changes no weight: the loss stays put until the scaler takes a step.
    assert len(set(run.losses[: len(run.skipped_steps) + 1])) == 1
    assert run.losses[-1] < run.losses[0] and all(math.isfinite(v) for v in run.losses)
    for name, gradient in run.gradients.items():
        expected = reference.gradients[name]
        assert bool(torch.isfinite(gradient).all())
        assert torch.allclose(
            gradient, expected, rtol=0.05, atol=1e-3 * float(expected.abs().max())
        )
    # Without a scaler nothing is skipped: an fp32 run takes every step.
    assert _train(FP32, 100.0, steps=3).skipped_steps == []


def test_the_non_finite_replay_does_not_blame_an_overflow_the_scaler_skips():
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(8, 16, generator=generator)
    targets = torch.randint(4, (8,), generator=generator)
    found = find_first_nonfinite(
        _model(),
        (inputs,),
        targets,
        RunSpec(CPU, FP16_AMP),
        _loop(100.0, steps=6),
    )
    assert found.step is None and found.tensor is None
