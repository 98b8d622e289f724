"""Numerics: metrics on known tensors, the dynamo rule (device fidelity), precision bands and the
precision-cost verdict, the first divergence by a layer's own error, reproducible references,
NaN as a blocker, the held-out metric, recorded settings, and bad input. Real torch throughout;
the compiled test uses real torch.compile (inductor) on the CPU."""

import copy
import dataclasses
import json
import math
import os
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from tests.fixtures.numerics_cases import classifier, sgd
from workbench.baseline.reference import make_reference, save_reference
from workbench.errors import BadInput
from workbench.numerics import records as numerics_records
from workbench.numerics import references, verdicts, wording
from workbench.numerics import run as numerics
from workbench.numerics import views as numerics_views
from workbench.numerics.batch import baseline_artifact_path, load_batch
from workbench.numerics.capture import AUTOCAST, FP32, PRECISIONS, Precision, RunSpec
from workbench.numerics.matched import matched_check
from workbench.numerics.metrics import (
    RULE_CLOSE,
    RULE_FP64,
    RULE_NO_YARDSTICK,
    RULE_NONFINITE,
    PrecisionCostRule,
    VerdictRule,
    compute_metrics,
    default_tolerances,
    judge,
    own_error,
)
from workbench.numerics.process_settings import numerics_settings
from workbench.numerics.records import (
    ATTENTION,
    BLOCKER,
    COULD_NOT_RUN,
    INHERITED,
    OWN,
    PASS,
    TRIVIAL,
    NumericsSettings,
)
from workbench.numerics.references import run_references
from workbench.numerics.run import compare_run
from workbench.results import save_result
from workbench.targets.cpu import CpuTarget
from workbench.workload import load_workload

CPU = CpuTarget()
STEPS = 4


def _deep_mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 4)
    )


DEEP = classifier("deep-mlp", _deep_mlp, 8)
SETTINGS = NumericsSettings(
    precisions=("fp32",), informative_precisions=(), compiled_precisions=(), steps=STEPS
)


@pytest.fixture(scope="module")
def deep():
    """The deep MLP's builder (fixed weights), batch and reference runs, shared by the tests."""
    state = DEEP.build_model().state_dict()

    def build():
        model = DEEP.build_model()
        model.load_state_dict(state)
        return model

    batch = DEEP.batch()
    refs = run_references(build, batch, DEEP, STEPS, CPU)
    assert refs.reproducibility.deterministic
    return build, batch, refs


def _compare(deep, build=None, spec=None):
    default_build, batch, refs = deep
    run = compare_run(
        spec or RunSpec(CPU, FP32), build or default_build, batch, refs, DEEP, SETTINGS
    )
    if run.status == "ok":
        run.precision_cost = verdicts.precision_cost(run, SETTINGS.cost, 0.0, 0.0)
        run.fidelity = verdicts.fidelity(run, "cpu")
    run.verdict = verdicts.run_verdict(run)
    return run


def _metrics(target, reference, fp64=None, rtol=1.3e-6, atol=1e-5):
    return compute_metrics("t", "layer", target, reference, fp64, rtol=rtol, atol=atol)


# --- metrics on known tensors -------------------------------------------------------------


def test_metrics_of_a_known_difference():
    m = _metrics(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([1.0, 2.0, 3.0, 5.0]))
    assert m.max_abs == 1.0 and m.mean_abs == 0.25
    assert m.rmse == pytest.approx(0.5)
    assert m.max_rel == pytest.approx(0.2)  # 1 / |5|
    assert m.relative_l2 == pytest.approx(1 / math.sqrt(39))
    assert m.sqnr_db == pytest.approx(20 * math.log10(math.sqrt(39)))
    assert m.cosine == pytest.approx(34 / math.sqrt(30 * 39))
    assert m.share_outside == 0.25
    assert (m.target_nan, m.target_inf, m.new_nonfinite) == (0, 0, 0)


def test_identical_tensors_have_zero_error_and_infinite_sqnr():
    x = torch.randn(3, 5)
    m = _metrics(x, x.clone(), x.double())
    assert m.max_abs == m.rmse == m.relative_l2 == m.share_outside == 0
    assert m.cosine == pytest.approx(1.0) and m.sqnr_db == math.inf
    assert m.target_rmse_vs_fp64 == m.reference_rmse_vs_fp64 == 0


def test_relative_error_denominator_is_floored_at_atol():
    m = _metrics(torch.tensor([1e-3]), torch.tensor([0.0]), atol=1e-5)
    assert m.max_rel == pytest.approx(100.0)  # 1e-3 / 1e-5, not inf


def test_nan_and_inf_are_counted_per_run_and_new_ones_apart():
    target = torch.tensor([float("nan"), 1.0, float("inf"), float("nan")])
    reference = torch.tensor([float("nan"), 1.0, 2.0, 3.0])
    m = _metrics(target, reference)
    assert (m.target_nan, m.target_inf, m.reference_nan, m.reference_inf) == (2, 1, 1, 0)
    assert m.new_nonfinite == 2  # NaN in both is not new
    assert m.compared == 1 and m.max_abs == 0
    assert m.share_outside == 0.5


def test_default_tolerances_agree_with_assert_close():
    assert default_tolerances(torch.bfloat16, torch.float32) == (1.6e-2, 1e-5)
    assert default_tolerances(torch.float32, torch.float32) == (1.3e-6, 1e-5)
    reference = torch.linspace(1, 2, 100)
    for scale in (1.0, 1.005, 1.03):
        target = (reference * scale).to(torch.bfloat16)
        rtol, atol = default_tolerances(target.dtype, reference.dtype)
        ours = _metrics(target, reference, rtol=rtol, atol=atol).share_outside == 0
        try:
            torch.testing.assert_close(target, reference, check_dtype=False)
            theirs = True
        except AssertionError:
            theirs = False
        assert ours == theirs, scale


def test_own_error_is_measured_against_the_band_rounding_alone_gives():
    fp64 = torch.linspace(-3, 3, 4096, dtype=torch.float64)
    rounded = fp64.to(torch.bfloat16)  # a perfect bf16 kernel: only the output is rounded
    reference = fp64.float()
    perfect = own_error("l", "Linear", rounded.clone(), rounded, reference, fp64)
    rms = float(fp64.square().mean().sqrt())
    # One rounding stays under u times the output's RMS: that bound is the band, and a perfect
    # kernel sits below it (amplification < 1, no layer to blame).
    assert perfect.unit_roundoff == 2.0**-8 and perfect.band == pytest.approx(2.0**-8 * rms)
    assert perfect.rounding_rmse < perfect.band and perfect.factor < 1
    assert perfect.amplification == pytest.approx(perfect.rounding_rmse / (2.0**-8 * rms))
    # An error 100 times what rounding gives is far above the band, whatever the scale.
    noisy = (fp64 + 100 * (rounded.double() - fp64)).to(torch.bfloat16)
    assert own_error("l", "Linear", noisy, rounded, reference, fp64).factor > 20
    # A layer that amplifies rounded inputs (x * 1000 - 1000 * x_rounded) gets a wider band.
    amplified = own_error(
        "l", "Cancel", rounded, 1000 * rounded.double() - 999 * fp64, reference, fp64
    )
    assert amplified.amplification > 100 and amplified.band == amplified.rounding_rmse
    broken = rounded.clone()
    broken[7] = float("nan")
    with_nan = own_error("l", "Linear", broken, rounded, reference, fp64)
    assert with_nan.new_nonfinite == 1 and with_nan.factor == math.inf
    # An exactly representable output (rounding alone is exact): the output's own rounding,
    # u times its RMS, is the floor of the band, so an exact result is not divided by zero.
    exact = fp64.round()
    floor = own_error("l", "ReLU", exact.float(), exact.float(), exact.float(), exact)
    assert floor.band == pytest.approx(2.0**-24 * float(exact.square().mean().sqrt()))
    assert floor.factor == 0.0


# --- the verdict rule -----------------------------------------------------------------------


def test_rule_passes_close_tensors_then_judges_by_rmse_against_fp64():
    rule = VerdictRule()
    fp64 = torch.linspace(-1, 1, 1000, dtype=torch.float64)
    reference = fp64.float()
    assert judge(_metrics(reference.clone(), reference, fp64), rule).rule == RULE_CLOSE
    # One element off by 2e-5: outside fp32 closeness, but an RMSE of 6.3e-7 is inside the
    # budget of 2 x the reference's RMSE against fp64 + 1e-5.
    nudged = reference.clone()
    nudged[500] += 2e-5
    near = _metrics(nudged, reference, fp64)
    assert near.share_outside > 0
    verdict = judge(near, rule)
    assert verdict.passed and verdict.rule == RULE_FP64
    far = judge(_metrics(reference + 1e-3, reference, fp64), rule)
    assert not far.passed and far.rule == RULE_FP64 and "RMSE vs fp64" in far.reason
    assert judge(_metrics(reference + 1e-3, reference), rule).rule == RULE_NO_YARDSTICK


def test_rule_fails_new_nonfinite_values_even_when_otherwise_close():
    reference = torch.ones(10)
    target = reference.clone()
    target[3] = float("nan")
    verdict = judge(_metrics(target, reference, reference.double()), VerdictRule())
    assert not verdict.passed and verdict.rule == RULE_NONFINITE


def test_rule_uses_the_larger_multiplier_for_16_bit_tensors_and_states_itself():
    rule = VerdictRule(multiplier=2.0, low_precision_multiplier=5.0, rmse_atol=1e-6)
    assert rule.multiplier_for("bfloat16") == 5.0 and rule.multiplier_for("float32") == 2.0
    statement = rule.statement()
    for text in ("2x", "5x", "1e-06", "fp64", "torch._dynamo.utils.same", "bfloat16 0.016/1e-05"):
        assert text in statement


# --- runs against the reference -------------------------------------------------------------


def test_fp32_against_fp32_passes_everything(deep):
    result = _compare(deep)
    assert result.status == "ok" and result.verdict.passed and result.tensors.passed
    assert result.fidelity.status == TRIVIAL and result.precision_cost.passed
    assert result.first_divergence is None
    assert [c.name for c in result.layers] == ["0", "1", "2", "3", "4"]
    assert {c.name for c in result.gradients} == {
        f"{i}.{p}" for i in (0, 2, 4) for p in ("weight", "bias")
    }
    assert len(result.losses) == STEPS and result.trajectory.verdict.passed


@pytest.fixture(scope="module")
def seed_mlp():
    """seed-mlp eager on the CPU with the notebook's default tolerances: the default precisions
    and fp16-cast named by the user (so judged), and fp16-autocast, the default informative run."""
    settings = NumericsSettings(
        precisions=("fp32", "bf16-autocast", "bf16-cast", "fp16-cast"), compiled_precisions=()
    )
    return numerics.run_numerics(load_workload("seed-mlp"), CPU, settings, log=lambda _: None)


def test_seed_mlp_bf16_autocast_passes_its_precision_cost(seed_mlp):
    """bf16 autocast differs from fp32 far beyond the dynamo rule's 3x (every Linear rounds to
    bf16), yet no layer adds more than its bf16 band and the loss and held-out metric hold."""
    run = seed_mlp.run("cpu bf16-autocast eager")
    assert run.run["autocast"] == {"device_type": "cpu", "dtype": "bfloat16"}
    assert not run.tensors.passed  # the fp32 dynamo rule alone would fail it
    assert run.layers[0].metrics.target_dtype == "bfloat16"
    assert not any(c.verdict.passed for c in run.layers)  # every layer fails the fp32 rule
    assert all(a.cause == INHERITED for a in run.attributions)
    assert run.precision_cost.status == "pass", run.precision_cost.reason
    assert run.first_divergence is None
    assert run.fidelity.status == TRIVIAL
    assert run.verdict.status == PASS
    assert run.validation.passed and run.validation.after.metric is not None


def test_a_passing_run_has_no_divergence_and_a_failing_one_names_its_rule(seed_mlp):
    for run in seed_mlp.target_runs:
        if run.verdict.status == PASS:
            assert run.first_divergence is None and run.precision_cost.passed
        else:
            assert run.verdict.reason.startswith(run.label)
            assert run.precision_cost.failed or run.fidelity.failed


def test_fp16_cast_nan_leads_the_headline_as_a_blocker(seed_mlp):
    run = seed_mlp.run("cpu fp16-cast eager")
    assert run.verdict.status == BLOCKER
    nonfinite = run.nonfinite
    assert nonfinite.step == next(i for i, v in enumerate(run.losses, 1) if math.isnan(v))
    # Adam's update in fp16 (eps 1e-8 underflows to 0) is where the first NaN/Inf is born.
    assert nonfinite.tensor.startswith("parameter ")
    headline = wording.headline(seed_mlp)
    assert headline.startswith(
        f"Blocker: fp16-cast eager: loss becomes NaN at step {nonfinite.step}; first non-finite "
        f"tensor: {nonfinite.tensor}"
    )
    verdict = numerics_records.notebook_verdict(seed_mlp)
    assert verdict.status == BLOCKER and "fp16-cast" in verdict.reason
    rows = {r["run"]: r for r in numerics_views.verdict_rows(seed_mlp)}
    assert f"step {nonfinite.step}" in rows["cpu fp16-cast eager"]["NaN/Inf"]


def test_a_nan_in_an_informative_precision_is_reported_not_a_blocker(seed_mlp):
    """The same fp16-cast NaN in a precision the user did not choose (informative_precisions):
    the verdict is about the migration's precisions, so it is no blocker there, and the
    headline, the runs table and the reading say why. Chosen, it blocks (the test above)."""
    runs = [dataclasses.replace(r, chosen=r.label != "cpu fp16-cast eager") for r in seed_mlp.runs]
    informative = dataclasses.replace(seed_mlp, runs=runs)
    step = informative.run("cpu fp16-cast eager").nonfinite.step
    assert informative.run("cpu fp16-cast eager").verdict.status == BLOCKER  # what it measured
    verdict = numerics_records.notebook_verdict(informative)
    assert verdict.status != BLOCKER and "fp16-cast" not in verdict.reason
    assert all("fp16-cast" not in f.reason for f in verdict.findings)
    headline = wording.headline(informative)
    assert not headline.startswith("Blocker") and "fp16-cast eager needs" not in headline
    assert (
        "informative, not in the verdict (not in precisions): "
        f"fp16-cast eager turns NaN/Inf at step {step}"
    ) in headline
    rows = {r["run"]: r for r in numerics_views.verdict_rows(informative)}
    assert rows["cpu fp16-cast eager"]["verdict"] == "BLOCKER (informative, not in the verdict)"
    about = [(kind, text) for kind, text in wording.reading(informative) if "fp16-cast" in text]
    assert about and all(kind == "info" for kind, _ in about)
    assert about[0][1].startswith("Informative, not in the verdict: cpu fp16-cast eager: loss")
    explanation = wording.run_explanation(informative.run("cpu fp16-cast eager"))
    assert "name it in precisions to have it judged" in explanation


def test_fp16_autocast_trains_as_torch_amp_does_and_stays_finite(seed_mlp):
    """fp16 under autocast with torch.amp's GradScaler (fp32 weights) trains seed-mlp for 20
    steps without a NaN and within its precision cost, where fp16-cast (no scaler, fp16
    weights) turns NaN at step 2; it is the default informative run, outside the verdict."""
    run = seed_mlp.run("cpu fp16-autocast eager")
    assert not run.chosen and run.role == numerics_records.ROLE_TARGET
    assert run.run["loss_scaling"].startswith("torch.amp.GradScaler")
    assert seed_mlp.run("cpu fp16-cast eager").run["loss_scaling"] is None
    assert len(run.losses) == 20 and all(math.isfinite(v) for v in run.losses)
    assert run.nonfinite is None and run.skipped_steps == []
    assert run.precision_cost.passed, run.precision_cost.reason
    assert run.verdict.status != BLOCKER
    assert f"fp16-autocast eager {run.verdict.status}" in wording.headline(seed_mlp)


def test_a_loss_that_degrades_beyond_tolerance_fails_the_precision_cost(seed_mlp):
    """bf16-cast keeps the weights in bf16: AdamW's small updates round away, and the loss
    trajectory drifts from fp32's by more than the 1% tolerance over 20 steps."""
    run = seed_mlp.run("cpu bf16-cast eager")
    assert run.trajectory_deviation > SETTINGS.cost.loss_tolerance
    assert run.precision_cost.status == "fail" and "loss trajectory" in run.precision_cost.failed
    assert (
        run.verdict.status == ATTENTION
        and "loss trajectory: the loss differs" in run.verdict.reason
    )
    looser = PrecisionCostRule(loss_tolerance=2 * run.trajectory_deviation)
    assert "loss trajectory" not in verdicts.precision_cost(run, looser, 0.0, 0.0).failed


def test_a_held_out_metric_beyond_tolerance_fails_and_within_passes(seed_mlp):
    run = copy.deepcopy(seed_mlp.run("cpu fp32 eager"))
    reference = run.validation.reference_after.metric
    rule = PrecisionCostRule(metric_tolerance=0.02)
    run.validation.metric_difference = 0.019
    assert verdicts.precision_cost(run, rule, 0.0, 0.0).passed
    run.validation.metric_difference = -0.021
    judged = verdicts.precision_cost(run, rule, 0.0, 0.0)
    assert judged.failed == ["held-out metric"] and f"{reference:.4g}" in judged.reason
    # The two reference runs' spread widens the tolerance, as stated.
    assert verdicts.precision_cost(run, rule, 0.0, 0.005).passed


def _perturbed(deep):
    build = deep[0]

    def make():
        model = build()
        with torch.no_grad():
            model[2].weight[0] += 0.5
        return model

    return make


def test_perturbed_layer_is_the_first_divergence_with_its_own_error(deep):
    result = _compare(deep, _perturbed(deep))
    assert not result.verdict.passed
    assert [c.verdict.passed for c in result.layers[:2]] == [True, True]
    divergence = result.first_divergence
    assert (divergence.layer, divergence.position, divergence.title) == ("2", 3, "2 (Linear)")
    assert divergence.attribution.cause == OWN
    assert divergence.attribution.own.factor > SETTINGS.cost.band_factor
    # Downstream layers fail in the full run, but stay in their band on the reference's inputs.
    assert result.attribution("3").cause == INHERITED
    assert result.attribution("4").cause == INHERITED
    assert result.attribution("3").own.factor <= SETTINGS.cost.band_factor
    assert "layer band" in result.precision_cost.failed


class NaNGelu(nn.GELU):
    """A GELU that emits one NaN: a kernel bug the target has and the reference does not."""

    def forward(self, x):
        out = super().forward(x).clone()
        out[0, 0] = float("nan")
        return out


def test_nan_in_the_target_only_fails_at_the_first_layer_where_it_appears(deep):
    build = deep[0]

    def with_nan():
        model = build()
        model[1] = NaNGelu()
        return model

    result = _compare(deep, with_nan)
    divergence = result.first_divergence
    assert divergence.layer == "1"
    assert divergence.full_run.verdict.rule == RULE_NONFINITE
    assert divergence.full_run.metrics.new_nonfinite == 1
    assert divergence.attribution.cause == OWN
    assert result.attribution("2").cause == INHERITED
    assert result.verdict.status == BLOCKER
    assert result.nonfinite.step == 1
    assert result.nonfinite.tensor == "layer 1 (NaNGelu)"
    assert result.layers[0].verdict.passed


def test_compiled_run_is_matched_by_name_and_passes(deep):
    result = _compare(deep, spec=RunSpec(CPU, FP32, compiled=True))
    assert result.status == "ok", result.error
    assert not result.unmatched_layers and not result.unmatched_gradients
    assert result.run["compiled_means"] == CPU.compile_description
    assert result.fidelity.status == "pass", result.fidelity.reason  # judged, not trivial
    assert result.verdict.passed, result.verdict.reason


def test_a_run_failing_device_fidelity_is_a_blocker(deep):
    """The fidelity rule itself, told the reference ran on another device: a changed weight in
    an fp32 run fails the dynamo rule against the fp32 reference."""
    result = _compare(deep, _perturbed(deep))
    assert verdicts.fidelity(result, "meta").status == "fail"
    result.fidelity = verdicts.fidelity(result, "meta")
    verdict = verdicts.run_verdict(result)
    assert verdict.status == BLOCKER and "device fidelity fails" in verdict.reason
    same = _compare(deep)
    assert verdicts.fidelity(same, "meta").status == "pass"


# --- settings -------------------------------------------------------------------------------

SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzzNUMERICS"
SECRET_PASSWORD = "s3cr3tNumericsPassw0rd"


def test_settings_are_recorded_without_secrets(monkeypatch):
    monkeypatch.setenv(
        "NEURON_CC_FLAGS",
        f"--auto-cast matmult --auto-cast-type=fp16 --cache_dir=s3://ci:{SECRET_PASSWORD}@bucket/c",
    )
    monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", "1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.delenv("XLA_USE_BF16", raising=False)
    settings = numerics_settings(CPU)
    assert settings["neuronx_cc"]["auto_cast"] == "matmult"
    assert settings["neuronx_cc"]["auto_cast_type"] == "fp16"
    assert settings["neuronx_cc"]["in_effect"] is False  # no neuronx-cc on a CPU run
    assert settings["stochastic_rounding"].startswith("on")
    assert settings["environment"]["XLA_USE_BF16"] == "unset"
    assert settings["torch"]["float32_matmul_precision"] == torch.get_float32_matmul_precision()
    text = json.dumps(settings)
    assert SECRET_PASSWORD not in text and SECRET_KEY not in text
    assert "AWS_SECRET_ACCESS_KEY" not in text


# --- bad input ------------------------------------------------------------------------------


class _Renamed(nn.Module):
    """Holds the model the way torch.compile's wrapper does, under `_orig_mod`."""

    def __init__(self, inner):
        super().__init__()
        self._orig_mod = inner

    def forward(self, x):
        return self._orig_mod(x)


def test_renamed_modules_are_matched_by_name(deep):
    result = _compare(deep, lambda: _Renamed(deep[0]()))
    assert not result.unmatched_layers and not result.unmatched_gradients
    assert [c.name for c in result.layers] == ["0", "1", "2", "3", "4"]
    assert result.verdict.passed


def test_a_changed_layer_structure_is_listed_not_dropped(deep):
    build = deep[0]

    def restructured():
        model = build()
        model[1] = nn.Sequential(nn.GELU())  # same maths, new name: 1 becomes 1.0
        return model

    result = _compare(deep, restructured)
    assert result.unmatched_layers.only_reference == ["1"]
    assert result.unmatched_layers.only_target == ["1.0"]
    assert [c.name for c in result.layers] == ["0", "2", "3", "4"]
    assert result.verdict.passed  # outputs and gradients still match by name
    assert any("1.0" in text for _, text in _reading_of(result))


def _reading_of(run):
    """The reading of a NumericsResult holding only `run`, as the notebook shows it."""
    result = numerics_records.NumericsResult(
        workload={},
        target=CPU.describe(),
        settings=SETTINGS,
        rule_statement=SETTINGS.rule.statement(),
        reference_label="cpu fp32 eager",
        yardstick_label="cpu fp64 eager",
        fp64_error=None,
        batch=numerics_records.BatchSource("the workload's seeded batch", None, False, "test"),
        reproducibility=numerics_records.Reproducibility(True, 0.0, None, "identical"),
        held_out_source="test",
        held_out_samples=0,
        task_metric=None,
        reference_held_out=(None, None),
        notes=[],
        reference_losses=run.losses,
        fp64_losses=None,
        dropout_disabled=[],
        numerics_settings=numerics_settings(CPU),
        runs=[run],
        wall_seconds=0.0,
    )
    return numerics_views.reading(result)


class NoCompilerCpu(CpuTarget):
    def compile(self, fn):
        raise RuntimeError("no compiler for this model")


def test_a_run_that_cannot_run_is_reported_and_the_others_compared():
    settings = NumericsSettings(
        precisions=("fp32",), informative_precisions=(), compiled_precisions=("fp32",), steps=2
    )
    result = numerics.run_numerics(DEEP, NoCompilerCpu(), settings, log=lambda _: None)
    eager, compiled = result.runs
    assert eager.status == "ok" and eager.verdict.passed
    assert compiled.status == "failed" and compiled.failed_phase == "compile"
    assert compiled.verdict.status == COULD_NOT_RUN
    assert "no compiler for this model" in compiled.error
    assert "1 could not run (fp32 compiled)" in numerics_views.headline(result)
    assert any("could not run (compile)" in text for _, text in numerics_views.reading(result))
    verdict = numerics_records.notebook_verdict(result)
    assert (verdict.status, verdict.reason) == (
        ATTENTION,
        "cpu fp32 compiled could not run (compile)",
    )


def test_an_autocast_dtype_the_device_lacks_is_refused_not_run_in_fp32(deep):
    fp64_autocast = Precision("fp64-autocast", torch.float64, AUTOCAST)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = _compare(deep, spec=RunSpec(CPU, fp64_autocast))
    assert result.status == "failed" and "not available here" in result.error


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"precisions": ("fp8",)}, "'fp8' is not a precision"),
        ({"precisions": (), "compiled_precisions": ()}, "nothing to compare"),
        ({"steps": 0}, "at least 1 optimizer step"),
        ({"compiled_precisions": ("fp64",)}, "'fp64' is not a precision"),
        ({"precisions": ("fp32", "fp32")}, "names a precision twice"),
        ({"validation_batches": 0}, "at least 1 held-out batch"),
    ],
)
def test_bad_settings_are_one_sentence(kwargs, message):
    with pytest.raises(BadInput, match=message):
        NumericsSettings(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rtol": 1e-3}, "rtol and atol go together"),
        ({"multiplier": 0.5}, "at least 1"),
        ({"rmse_atol": -1.0}, "at least 0"),
    ],
)
def test_bad_rule_parameters_are_one_sentence(kwargs, message):
    with pytest.raises(BadInput, match=message):
        VerdictRule(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"band_factor": 0.5}, "band_factor 0.5: use at least 1"),
        ({"loss_tolerance": -0.1}, "loss_tolerance -0.1: use a finite number"),
        ({"metric_tolerance": float("nan")}, "metric_tolerance nan: use a finite number"),
    ],
)
def test_bad_precision_cost_parameters_are_one_sentence(kwargs, message):
    with pytest.raises(BadInput, match=message):
        PrecisionCostRule(**kwargs)


def test_a_named_baseline_artifact_that_is_missing_is_bad_input(tmp_path):
    with pytest.raises(BadInput, match="is not a file"):
        baseline_artifact_path(str(tmp_path / "missing.pt"), tmp_path)
    default = baseline_artifact_path("", tmp_path)
    assert default == tmp_path / "01_baseline_reference.pt"


# --- notebook 01's artifact, and the saved result ----------------------------------------------


def test_the_baseline_artifact_batch_is_used_when_it_matches(tmp_path, deep):
    build = deep[0]
    path = save_reference(make_reference(DEEP, CPU), tmp_path / "01_baseline_reference.pt")
    batch, source = load_batch(DEEP, build, path, VerdictRule())
    assert source.used_artifact and source.baseline_device == "cpu"
    assert source.baseline_outputs.verdict.passed  # eval-mode fp32 CPU outputs agree exactly
    assert torch.equal(batch[0][0], DEEP.batch()[0][0])
    other = load_workload("seed-mlp")
    _, refused = load_batch(other, lambda: other.build_model(), path, VerdictRule())
    assert not refused.used_artifact and "deep-mlp" in refused.note


def test_result_data_saves_as_json_with_rule_settings_and_every_run(tmp_path, deep):
    settings = NumericsSettings(
        precisions=("fp32", "bf16-cast"),
        informative_precisions=(),
        compiled_precisions=(),
        steps=STEPS,
    )
    result = numerics.run_numerics(DEEP, CPU, settings, log=lambda _: None)
    data = numerics_records.result_data(result)
    path = save_result(tmp_path, "03_numerics", data)
    saved = json.loads(path.read_text())["data"]
    assert saved["headline"].endswith(".") and saved["headline"].count(". ") == 0
    assert saved["rule"]["multiplier"] == 2.0 and "fp64" in saved["rule"]["statement"]
    assert [r["run"]["label"] for r in saved["runs"]] == ["cpu fp32 eager", "cpu bf16-cast eager"]
    bf16 = saved["runs"][1]
    assert {"max_abs", "mean_abs", "max_rel", "rmse", "cosine", "sqnr_db", "share_outside"} <= set(
        bf16["layers"][0]["metrics"]
    )
    assert bf16["layers"][0]["module_type"] == "Linear"
    for run in saved["runs"]:
        assert run["verdict"]["status"] in (PASS, ATTENTION, BLOCKER)
        assert run["verdict"]["reason"].startswith(run["run"]["label"])
    verdict = saved["verdict"]
    assert {"status", "reason", "rule"} <= set(verdict) and verdict["rule"]
    expected = numerics_records.notebook_verdict(result)
    assert (verdict["status"], verdict["reason"]) == (expected.status, expected.reason)
    validation = saved["validation"]
    assert validation["task_metric"] == "accuracy" and validation["samples"] == 4 * DEEP.batch_size
    assert "seed 43" in validation["source"]
    assert [r["run"] for r in validation["runs"]] == ["cpu fp32 eager", "cpu bf16-cast eager"]
    fp32 = validation["runs"][0]
    assert fp32["after"] == validation["reference"]["after"] and fp32["passed"] is True
    assert validation["reference"]["before"]["loss"] != validation["reference"]["after"]["loss"]
    assert saved["reference"]["reproducibility"]["deterministic"] is True
    assert saved["numerics_settings"]["torch"]["deterministic_algorithms"] is False
    assert set(PRECISIONS) >= set(saved["settings"]["precisions"])


class _OtherDevice(CpuTarget):
    """A target on another device, for planning only (nothing runs on it)."""

    name = "other"

    @property
    def device(self):
        return torch.device("meta")


def test_a_target_on_another_device_gets_cpu_baselines_for_its_16_bit_runs():
    settings = NumericsSettings(
        precisions=("fp32", "bf16-autocast"), compiled_precisions=("fp16-cast",)
    )
    plan = [(spec.label, role) for spec, role in numerics.plan_runs(_OtherDevice(), CPU, settings)]
    assert plan == [
        ("other fp32 eager", numerics_records.ROLE_TARGET),
        ("other bf16-autocast eager", numerics_records.ROLE_TARGET),
        ("other fp16-autocast eager", numerics_records.ROLE_TARGET),  # the default informative
        ("cpu bf16-autocast eager", numerics_records.ROLE_PRECISION_BASELINE),
        ("cpu fp16-autocast eager", numerics_records.ROLE_PRECISION_BASELINE),
        ("cpu fp16-cast eager", numerics_records.ROLE_PRECISION_BASELINE),
        ("other fp16-cast compiled", numerics_records.ROLE_TARGET),
    ]
    chosen = [
        numerics.is_chosen(spec, settings)
        for spec, role in numerics.plan_runs(_OtherDevice(), CPU, settings)
        if role == numerics_records.ROLE_TARGET
    ]
    assert chosen == [True, True, False, True]
    on_cpu = [spec.label for spec, _ in numerics.plan_runs(CPU, CPU, settings)]
    assert on_cpu == [
        "cpu fp32 eager",
        "cpu bf16-autocast eager",
        "cpu fp16-autocast eager",
        "cpu fp16-cast eager",
        "cpu fp16-cast compiled",
    ]
    # Named in precisions too, a precision is the user's choice: judged, and run once.
    named = dataclasses.replace(settings, precisions=("fp32", "fp16-autocast"))
    assert [s.label for s, _ in numerics.plan_runs(CPU, CPU, named)][:2] == [
        "cpu fp32 eager",
        "cpu fp16-autocast eager",
    ]
    assert numerics.is_chosen(RunSpec(CPU, PRECISIONS["fp16-autocast"]), named)


def test_a_16_bit_run_is_also_judged_against_the_cpu_run_of_its_precision(deep):
    spec = RunSpec(CPU, PRECISIONS["bf16-cast"])
    baseline = _compare(deep, spec=spec)
    assert not baseline.tensors.passed  # bf16 weights are not fp32
    same = matched_check(_compare(deep, spec=spec), baseline, VerdictRule())
    assert same.passed and same.baseline == "cpu bf16-cast eager"
    worse = matched_check(_compare(deep, _perturbed(deep), spec), baseline, VerdictRule())
    assert not worse.passed and "outputs" in worse.failed


class _Twice(nn.Module):
    """One Linear called twice, with dropout between: call keys and dropout off."""

    def __init__(self):
        super().__init__()
        self.shared = nn.Linear(16, 16)
        self.drop = nn.Dropout(0.5)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.shared(self.drop(self.shared(x))))


def test_repeated_calls_are_keyed_by_call_and_dropout_is_off():
    workload = classifier("twice", _Twice, 8, optimizer=sgd(0.1))
    result = numerics.run_numerics(workload, CPU, SETTINGS, log=lambda _: None)
    (run,) = result.runs
    assert [c.name for c in run.layers] == ["shared", "drop", "shared#2", "head"]
    assert result.dropout_disabled == ["drop"]
    assert run.verdict.passed  # with dropout on, each run would draw its own masks


# --- the layer that really diverges -----------------------------------------------------------


class Cancel(nn.Module):
    """(x + 2048) - 2048: exact in fp32 for inputs of order 1, catastrophic in fp16, whose
    spacing at 2048 is 2."""

    def forward(self, x):
        return (x + 2048) - 2048


def _cancelling_model() -> nn.Module:
    model = nn.Sequential()
    model.add_module("linear", nn.Linear(16, 32))
    model.add_module("cancel", Cancel())
    model.add_module("head", nn.Linear(32, 4))
    return model


CANCELLING = classifier("cancelling", _cancelling_model, 16)


def test_the_first_divergence_is_the_cancelling_layer_in_fp16_and_none_in_fp32():
    settings = NumericsSettings(
        precisions=("fp32", "fp16-autocast"), compiled_precisions=(), steps=STEPS
    )
    result = numerics.run_numerics(CANCELLING, CPU, settings, log=lambda _: None)
    fp32, fp16 = result.runs
    assert fp32.first_divergence is None and not fp32.attributions
    divergence = fp16.first_divergence
    assert divergence.title == "cancel (Cancel)"
    assert divergence.attribution.own.factor > 100 * settings.cost.band_factor
    # The Linear before it fails the dynamo rule too, but its full-run error stays within 8x one
    # fp16 rounding, so it is not re-run; the head, far off, carries cancel's error.
    assert not fp16.layers[0].verdict.passed and fp16.attribution("linear") is None
    assert fp16.attribution("head").cause == INHERITED
    assert "layer cancel (Cancel)" in fp16.precision_cost.reason
    # Its logits are far from fp32's: AWS's teacher-forced cosine gate blocks the port.
    assert fp16.verdict.status == BLOCKER and "teacher-forced cosine fails" in fp16.verdict.reason
    text = " ".join(t for _, t in wording.reading(result))
    assert "first divergence at layer cancel (Cancel)" in text and "float16 band" in text
    saved = numerics_records.result_data(result)["runs"][1]
    assert saved["first_divergence"]["attribution"]["own"]["unit_roundoff"] == 2.0**-11


# --- reproducible references ------------------------------------------------------------------


class _DropoutNet(nn.Module):
    """Dropout as a module and as a function of self.training (as attention's dropout_p is):
    switching dropout modules off does not reach the second, only seeding does."""

    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(16, 32)
        self.drop = nn.Dropout(0.3)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        hidden = F.dropout(self.inner(x), 0.3, self.training)
        return self.head(self.drop(hidden))


def test_a_dropout_models_fp32_eager_run_matches_its_reference():
    workload = classifier("dropout", _DropoutNet, 16)
    result = numerics.run_numerics(workload, CPU, SETTINGS, log=lambda _: None)
    (run,) = result.runs
    assert result.reproducibility.deterministic
    assert run.tensors.passed and run.trajectory_deviation == 0.0
    assert run.verdict.status == PASS


class _Unseeded(nn.Module):
    """Noise from a generator no seed reaches: two reference runs cannot agree."""

    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(16, 4)

    def forward(self, x):
        generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
        return self.layer(x + 1e-3 * torch.randn(x.shape, generator=generator))


def test_a_reference_that_is_not_deterministic_is_said_and_judged_against_its_spread():
    workload = classifier("unseeded", _Unseeded, 64, optimizer=sgd(0.1))
    result = numerics.run_numerics(workload, CPU, SETTINGS, log=lambda _: None)
    reproducibility = result.reproducibility
    assert not reproducibility.deterministic and reproducibility.largest_difference > 0
    assert reproducibility.note.startswith("The reference is not deterministic")
    assert f"{reproducibility.largest_difference:.3g}" in reproducibility.note
    assert ("warn", reproducibility.note) in wording.reading(result)
    (run,) = result.runs
    spreads = [c.metrics.reference_spread for c in run.final_comparisons]
    # Each comparison carries the references' spread, so the verdict can widen by it. (Whether
    # a further random draw falls inside that spread is itself random: not asserted.)
    assert any(spreads)
    # The second reference run records no layer; once it differs, a third one does, so the
    # layers are judged against a spread too.
    assert any(c.metrics.reference_spread for c in run.layers)


def test_a_deterministic_reference_runs_twice_and_hooks_its_layers_once(monkeypatch):
    recorded, trained = [], []
    original_recorder, original_train = references.LayerRecorder, references.train_run

    def counting_recorder(model, **kwargs):
        recorded.append(kwargs)
        return original_recorder(model, **kwargs)

    def counting_train(model, spec, *args, **kwargs):
        trained.append(spec.label)
        return original_train(model, spec, *args, **kwargs)

    monkeypatch.setattr(references, "LayerRecorder", counting_recorder)
    monkeypatch.setattr(references, "train_run", counting_train)
    refs = run_references(DEEP.build_model, DEEP.batch(), DEEP, STEPS, CPU)
    assert refs.reproducibility.deterministic
    reference, yardstick = refs.spec.label, refs.fp64_spec.label
    # The reference, its repeat, its run from weights and inputs one ulp away (its
    # sensitivity, with its first gradients), fp64.
    assert trained == [reference, reference, reference, yardstick]
    assert refs.sensitivity is not None and len(refs.sensitivity.losses) == STEPS
    assert set(refs.sensitivity.gradients) == set(refs.training.gradients)
    # One recorder keeps the reference's inputs, one records the yardstick: none for the repeat.
    assert recorded == [{"keep_inputs": True}, {"keep_inputs": False}]


# --- held-out data and what cannot be compared -------------------------------------------------


class _Logits:
    """An output type the tree walk does not open: no floating-point tensor is found."""

    def __init__(self, logits):
        self.logits = logits


class _OpaqueOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(16, 4)

    def forward(self, x):
        return _Logits(self.layer(x))


def test_no_float_outputs_and_no_task_metric_are_one_sentence_each_and_the_rest_compared():
    held_out = [DEEP.batch_maker(5, torch.Generator().manual_seed(7)) for _ in range(2)]
    workload = classifier(
        "opaque",
        _OpaqueOutput,
        8,
        loss_fn=lambda outputs, targets: F.cross_entropy(outputs.logits, targets),
        task_metric=None,
        evaluation_batches=lambda: held_out,
    )
    settings = NumericsSettings(
        precisions=("fp32", "bf16-autocast"), informative_precisions=(), compiled_precisions=()
    )
    result = numerics.run_numerics(workload, CPU, settings, log=lambda _: None)
    assert len(result.notes) == 4
    assert result.notes[0].startswith("The model of workload 'opaque' returns no floating-point")
    assert result.notes[1].startswith("Workload 'opaque' has no task metric")
    # No logits to compare: the agreement gates say so once; no downstream_eval: one sentence.
    assert result.notes[2].startswith("The reference's logits on the held-out data could not")
    assert result.notes[3].startswith("Workload 'opaque' names no downstream_eval")
    assert all(n.count(". ") == 0 and n.endswith(".") for n in result.notes)
    data = numerics_records.result_data(result)
    assert data["validation"]["source"] == "the workload's evaluation_batches (2)"
    assert data["validation"]["samples"] == 10 and data["validation"]["task_metric"] is None
    for run in result.runs:
        assert run.status == "ok" and not run.outputs and run.gradients and run.layers
        assert run.validation.after.metric is None and run.validation.loss_deviation is not None
