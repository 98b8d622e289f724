"""A run against the CPU eager run at its own precision (numerics/matched.py): a gradient whose
error stays within one rounding at that precision passes however the two runs' roundings fall;
one a real defect moves fails."""

from __future__ import annotations

import torch

from workbench.numerics.matched import matched_check
from workbench.numerics.metrics import VerdictRule, compute_metrics, judge
from workbench.numerics.records import RunResult, TensorComparison

RULE = VerdictRule()
EXACT = torch.tensor([43.7104], dtype=torch.float64)  # a linear regression's one weight gradient


def _run(label: str, value: float) -> RunResult:
    """A bf16-autocast run whose weight gradient came out as `value` (the fp64 run: EXACT)."""
    target = torch.tensor([value])
    metrics = compute_metrics(
        "weight", "gradient", target, EXACT.float(), EXACT, rtol=1.3e-6, atol=1e-5
    )
    comparison = TensorComparison(metrics, judge(metrics, RULE))
    run = {"label": label, "precision": "bf16-autocast", "device": "cpu", "compiled": False}
    return RunResult(run=run, role="precision", gradients=[comparison])


def test_two_roundings_of_a_one_element_gradient_within_one_bf16_ulp_pass():
    """Must pass: eager's gradient 0.04 from exact, compiled's 0.13 (3.2x eager's error, both
    below half a bf16 ulp of 43.7, 0.125): two correct roundings, not a device defect."""
    eager = _run("cpu bf16-autocast eager", 43.7104 + 0.0398)
    compiled = _run("cpu bf16-autocast compiled", 43.7104 - 0.1279)
    check = matched_check(compiled, eager, RULE)
    assert check is not None and check.passed, check


def test_a_gradient_a_defect_moves_beyond_the_roundings_fails():
    """Must fail: an x1.1 gradient (4.4 off) is far beyond one rounding at bf16."""
    eager = _run("cpu bf16-autocast eager", 43.7104 + 0.0398)
    scaled = _run("cpu bf16-autocast compiled", 43.7104 * 1.1)
    check = matched_check(scaled, eager, RULE)
    assert check is not None and not check.passed and check.failed == ["weight"]
