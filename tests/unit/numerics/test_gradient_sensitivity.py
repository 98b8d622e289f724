"""Device fidelity on the gradients of a net with ReLU kinks: a pre-activation within a reordered
sum's error of zero lands on the other side of the kink in one run and not the other, and its
whole upstream gradient is kept or dropped, so a sound compiled run's gradients can sit far
beyond twice the eager reference's distance from fp64. Each gradient is therefore also judged
against the reference's own sensitivity: its first gradients from weights and inputs one ulp
away. Constructed tensors for the rule (a case that must pass, a planted scale that must fail),
then a real BatchNorm/ReLU residual net under real torch.compile (inductor) on the CPU: sound,
it keeps device fidelity; with a gradient doubled in its compiled path only, it fails."""

import math

import pytest
import torch
from torch import nn

from tests.fixtures.numerics_cases import classifier, sgd
from workbench.numerics import verdicts
from workbench.numerics.capture import FP32, RunSpec
from workbench.numerics.metrics import RULE_FP64, VerdictRule, trajectory_sensitivity
from workbench.numerics.records import BLOCKER, NumericsSettings
from workbench.numerics.references import nudge_inputs, run_references
from workbench.numerics.run import compare_run
from workbench.numerics.tensors import compare_tensor
from workbench.numerics.training import GRADIENT_SENSITIVITY_SOURCE, widen_by_sensitivity
from workbench.targets.cpu import CpuTarget

RULE = VerdictRule()
CPU = CpuTarget()


# --- the rule on constructed gradients ---------------------------------------------------------


def _kink_flips(gradient: torch.Tensor, positions: list[int], upstream: float) -> torch.Tensor:
    """`gradient` with the upstream gradient of a few pre-activations kept where the other run
    dropped it: what a kink taken on the other side does to a weight's gradient."""
    flipped = gradient.clone()
    for sign, position in enumerate(positions):
        flipped[position] += upstream if sign % 2 else -upstream
    return flipped


def _gradients():
    generator = torch.Generator().manual_seed(0)
    fp64 = torch.randn(4096, generator=generator, dtype=torch.float64) * 1e-2
    reference = fp64.float()  # fp32 eager: a rounding away from fp64
    compiled = _kink_flips(reference, [7, 900, 1500, 2900, 4000], 3e-3)
    nudged = _kink_flips(reference, [50, 1200, 2000, 3100, 3500], 3e-3)
    return fp64, reference, compiled, nudged


def _judged(target, reference, fp64, nudged):
    comparison = compare_tensor("conv.weight", "gradient", target, reference, fp64, RULE)
    before = comparison.verdict.passed
    sensitivity = trajectory_sensitivity(
        [1.0], [1.0], gradients=({"conv.weight": nudged}, {"conv.weight": reference})
    )
    spread = sensitivity.gradients["conv.weight"]
    widen_by_sensitivity(comparison, spread, GRADIENT_SENSITIVITY_SOURCE, RULE)
    return before, comparison


def test_kink_flips_within_the_references_own_sensitivity_pass_and_say_so():
    fp64, reference, compiled, nudged = _gradients()
    before, comparison = _judged(compiled, reference, fp64, nudged)
    assert not before  # 2x the fp32 reference's distance from fp64 alone fails it
    assert comparison.verdict.passed and comparison.verdict.rule == RULE_FP64
    assert GRADIENT_SENSITIVITY_SOURCE in comparison.verdict.reason


def test_a_planted_gradient_scale_fails_beyond_the_references_own_sensitivity():
    fp64, reference, _, nudged = _gradients()
    _, comparison = _judged(reference * 1.1, reference, fp64, nudged)
    assert not comparison.verdict.passed
    assert GRADIENT_SENSITIVITY_SOURCE in comparison.verdict.reason


def test_a_reference_whose_nudged_gradients_do_not_move_keeps_the_fp64_yardstick():
    """No kink taken on the other side in the nudged run: nothing widens, the flips fail."""
    fp64, reference, compiled, _ = _gradients()
    _, comparison = _judged(compiled, reference, fp64, reference.clone())
    assert not comparison.verdict.passed
    assert comparison.metrics.spread_source is None


def test_nudged_inputs_move_every_float_input_by_one_ulp_and_leave_ids_and_targets():
    images = torch.randn(8, 3, 4, 4)
    ids, targets = torch.randint(10, (8, 5)), torch.randint(3, (8,))
    (moved, same_ids), same_targets = nudge_inputs(((images, ids), targets))
    up = torch.nextafter(images, torch.tensor(math.inf))
    down = torch.nextafter(images, torch.tensor(-math.inf))
    assert bool(((moved == up) | (moved == down)).all())
    assert 0.3 < float((moved == up).double().mean()) < 0.7
    assert torch.equal(same_ids, ids) and torch.equal(same_targets, targets)
    keyed, _ = nudge_inputs(({"pixel_values": images}, targets))
    assert not torch.equal(keyed["pixel_values"], images)


# --- a real BatchNorm/ReLU residual net under torch.compile ------------------------------------


class _ResidualBlock(nn.Module):
    def __init__(self, channels: int, planted: bool):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu2 = nn.ReLU()
        # One graph for the sound and the planted net (one compile): only this value differs.
        scale = torch.tensor(2.0 if planted else 1.0)
        self.register_buffer("gradient_scale", scale, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            # s*x - (s-1)*x is x exactly for s = 1 or 2, so the forward is untouched; the
            # gradient into x is multiplied by s.
            s = self.gradient_scale
            x = s * x - (s - 1) * x.detach()
        return self.relu2(x + self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x))))))


class _ResNetStyle(nn.Module):
    def __init__(self, planted: bool = False):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.block = _ResidualBlock(8, planted)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.block(self.relu(self.bn(self.stem(x))))
        return self.head(self.pool(features).flatten(1))


RESNET = classifier(
    "resnet-style", _ResNetStyle, 16, features=(3, 12, 12), classes=10, optimizer=sgd(0.05, 0.9)
)
SETTINGS = NumericsSettings(
    precisions=("fp32",), informative_precisions=(), compiled_precisions=("fp32",), steps=2
)


@pytest.fixture(scope="module")
def resnet():
    state = RESNET.build_model().state_dict()
    batch = RESNET.batch()

    def builder(planted: bool):
        def build():
            model = _ResNetStyle(planted)
            model.load_state_dict(state)
            return model

        return build

    refs = run_references(builder(False), batch, RESNET, SETTINGS.steps, CPU)
    return builder, batch, refs


def _compiled_fidelity(resnet, planted: bool):
    builder, batch, refs = resnet
    spec = RunSpec(CPU, FP32, compiled=True)
    run = compare_run(spec, builder(planted), batch, refs, RESNET, SETTINGS)
    assert run.status == "ok", run.error
    assert set(refs.sensitivity.gradients) == {g.name for g in run.gradients}
    run.fidelity = verdicts.fidelity(run, "cpu")
    run.precision_cost = verdicts.precision_cost(run, SETTINGS.cost, 0.0, 0.0)
    run.verdict = verdicts.run_verdict(run)
    return run


def test_a_sound_compiled_batchnorm_relu_net_keeps_device_fidelity(resnet):
    run = _compiled_fidelity(resnet, planted=False)
    assert run.fidelity.status == "pass", run.fidelity.reason
    assert run.verdict.status != BLOCKER, run.verdict.reason


def test_a_gradient_doubled_in_the_compiled_path_only_fails_device_fidelity(resnet):
    run = _compiled_fidelity(resnet, planted=True)
    assert run.fidelity.status == "fail"
    failed = {g.name for g in run.gradients if not g.verdict.passed}
    assert {"stem.weight", "bn.weight"} <= failed, failed
    assert run.verdict.status == BLOCKER and "device fidelity fails" in run.verdict.reason
