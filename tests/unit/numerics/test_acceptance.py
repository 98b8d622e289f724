"""AWS's acceptance gates and convergence parity: each rule with a case that must pass and one
that must fail, then whole comparisons: the built-in models and a tiny Hugging Face causal LM
pass every gate in fp32 eager and bf16 autocast, a planted silent miscompile (a layer whose
compiled path adds a small bias) fails the R-ratio at that layer, and bad input is one sentence
each with the rest still judged. Real torch throughout; the compiled case uses real
torch.compile (inductor) on the CPU."""

import math

import pytest
import torch
from torch import nn

from tests.fixtures.numerics_cases import classifier
from workbench.errors import BadInput
from workbench.numerics import acceptance, convergence, wording
from workbench.numerics import records as numerics_records
from workbench.numerics import run as numerics
from workbench.numerics.acceptance_records import (
    CONVERGENCE,
    COSINE,
    DOWNSTREAM,
    GATE_FAIL,
    GATE_NOT_JUDGED,
    GATE_PASS,
    KL,
    LIVENESS,
    LOGIT_MATCH,
    R_RATIO,
    TOKEN_MATCH,
    TOP1,
    AcceptanceRule,
    DownstreamScore,
    LayerRatio,
    RunAcceptance,
)
from workbench.numerics.ratio import ratio_of
from workbench.numerics.records import BLOCKER, OWN, PASS, NumericsSettings
from workbench.numerics.token_match import AcceptanceSet, agreement, position_stats, set_reference
from workbench.targets.cpu import CpuTarget
from workbench.workload import load_workload

CPU = CpuTarget()
RULE = AcceptanceRule()
QUICK = NumericsSettings(
    precisions=("fp32", "bf16-autocast"),
    compiled_precisions=(),
    steps=2,
    convergence_steps=4,
    generated_tokens=8,
    informative_precisions=(),
)


def _gate(gates, name):
    return next(g for g in gates if g.gate == name)


def _prepared():
    return acceptance.Prepared(None, None, [1, 2], None)


# --- each rule: must pass, must fail ----------------------------------------------------------


def test_r_ratio_near_one_passes_above_the_threshold_fails_and_the_floor_holds():
    assert ratio_of(1.0, 1.0, 1.0) == 1.0 <= RULE.r_threshold
    assert ratio_of(2.0, 1.0, 1.0) > RULE.r_threshold
    # A layer the precision computes exactly: assert_close's fp32 rtol is the floor.
    assert ratio_of(0.0, 0.0, 1.0) == 0.0 and ratio_of(1.3e-6, 0.0, 1.0) == 1.0
    assert math.isinf(ratio_of(math.nan, 1.0, 1.0)) or ratio_of(math.nan, 1.0, 1.0) > 1.2


def _ratios(value):
    return RunAcceptance(
        ratio_basis="test",
        ratios=[LayerRatio("0", "layer", "Linear", value, value, 1.0)],
    )


def test_r_ratio_gate_passes_at_1_1_and_fails_at_1_5():
    passing = acceptance.gates(_ratios(1.1), RULE, _prepared(), None)
    failing = acceptance.gates(_ratios(1.5), RULE, _prepared(), None)
    assert _gate(passing, R_RATIO).status == GATE_PASS
    assert _gate(failing, R_RATIO).status == GATE_FAIL
    assert "R 1.5" in _gate(failing, R_RATIO).measured
    assert _gate(failing, R_RATIO).source.startswith("AWS neuron-framework-equivalence")


def test_cosine_and_kl_pass_for_rounding_and_fail_for_a_shifted_run():
    generator = torch.Generator().manual_seed(1)
    reference = torch.randn(200, 16, generator=generator, dtype=torch.float64)
    aset = AcceptanceSet(TOP1, [], 0, None, "test")
    set_reference(aset, reference, None)
    rounded = agreement(aset, position_stats(aset, reference.bfloat16().double()), None, 0.95, None)
    noisy = reference + 2.0 * torch.randn(200, 16, generator=generator, dtype=torch.float64)
    shifted = agreement(aset, position_stats(aset, noisy), None, 0.95, None)
    good = acceptance.gates(RunAcceptance(agreement=rounded), RULE, _prepared(), None)
    bad = acceptance.gates(RunAcceptance(agreement=shifted), RULE, _prepared(), None)
    assert _gate(good, COSINE).status == GATE_PASS and _gate(good, KL).status == GATE_PASS
    assert _gate(bad, COSINE).status == GATE_FAIL and _gate(bad, KL).status == GATE_FAIL
    assert _gate(good, TOP1).status == GATE_PASS


def test_nan_logits_agree_with_nothing():
    reference = torch.randn(10, 4, dtype=torch.float64)
    aset = AcceptanceSet(TOP1, [], 0, None, "test")
    set_reference(aset, reference, None)
    run = reference.clone()
    run[0, 0] = math.nan
    found = agreement(aset, position_stats(aset, run), None, 0.95, None)
    assert found.exact_matches == 9 and math.isinf(found.kl_max) and found.cosine_p5 == -1.0


def test_downstream_drop_within_two_points_passes_beyond_fails_and_an_error_is_not_judged():
    def judged(score):
        return _gate(
            acceptance.gates(RunAcceptance(downstream=score), RULE, _prepared(), None), DOWNSTREAM
        )

    assert judged(DownstreamScore({"qa": 0.80}, {"qa": 0.79})).status == GATE_PASS
    failing = judged(DownstreamScore({"qa": 0.80, "math": 0.5}, {"qa": 0.75, "math": 0.5}))
    assert failing.status == GATE_FAIL and "qa 0.8 -> 0.75 (-5 points)" in failing.measured
    broken = judged(DownstreamScore({"qa": 0.8}, error="the downstream_eval raised (boom)"))
    assert broken.status == GATE_NOT_JUDGED and "raised" in broken.measured


def test_t_distribution_matches_tables():
    # One-sided 5% critical values: t(5) 2.015, t(2) 2.920, t(inf) 1.645.
    assert convergence.t_survival(2.015, 5) == pytest.approx(0.05, abs=1e-4)
    assert convergence.t_survival(2.920, 2) == pytest.approx(0.05, abs=1e-4)
    assert convergence.t_survival(-2.015, 5) == pytest.approx(0.95, abs=1e-4)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"r_threshold": -1.0}, "r_threshold -1.0"),
        ({"token_match": 1.5}, "token_match 1.5"),
        ({"liveness": 0.99}, "liveness 0.99 is above token_match"),
        ({"alpha": 0.0}, "convergence_alpha 0.0"),
    ],
)
def test_bad_gate_thresholds_are_one_sentence(kwargs, message):
    with pytest.raises(BadInput, match=message):
        AcceptanceRule(**kwargs)


# --- whole comparisons ------------------------------------------------------------------------


def _all_pass(result):
    assert numerics_records.notebook_verdict(result).status == PASS, wording.headline(result)
    for run in result.target_runs:
        assert run.verdict.status == PASS, run.verdict.reason
        statuses = {g.gate: g.status for g in run.acceptance.gates}
        assert GATE_FAIL not in statuses.values(), statuses
        assert statuses[R_RATIO] == statuses[LIVENESS] == statuses[COSINE] == GATE_PASS
        assert statuses[KL] == GATE_PASS
        # Four steps teach these models less than their runs differ: no target to reach, which
        # the study says (tests/unit/numerics/test_convergence.py holds its pass and fail cases).
        study = run.acceptance.convergence
        assert statuses[CONVERGENCE] == GATE_PASS or "no quality to reach" in study.note
    assert wording.headline(result).split(";")[0].startswith("Acceptance: all 2 runs")


@pytest.mark.parametrize("name", ["seed-mlp", "tiny-cnn", "tiny-transformer"])
def test_built_in_models_pass_every_gate_in_fp32_eager_and_bf16_autocast(name):
    result = numerics.run_numerics(load_workload(name), CPU, QUICK, log=lambda _: None)
    _all_pass(result)
    if name == "tiny-transformer":
        # It has no generate(): one sentence, top-1 agreement judged instead.
        assert any("has no generate()" in note for note in result.notes)
        assert result.target_runs[0].acceptance.agreement.kind == TOP1


def test_a_tiny_hugging_face_causal_lm_passes_every_gate_with_its_greedy_token_match(tmp_path):
    pytest.importorskip("transformers")
    from tests.fixtures.hf_checkpoints import save_tiny_checkpoints

    folder = save_tiny_checkpoints(tmp_path)["llama"]
    workload = load_workload(f"hf:{folder}", sequence_length=16, batch_size=4)
    result = numerics.run_numerics(workload, CPU, QUICK, log=lambda _: None)
    _all_pass(result)
    tokens = _gate(result.target_runs[1].acceptance.gates, TOKEN_MATCH)
    assert tokens.status == GATE_PASS and "exact (40 of 40 free-running" in tokens.measured
    assert _gate(result.target_runs[1].acceptance.gates, LOGIT_MATCH).status == GATE_PASS
    assert "5 held-out prompts of 8 tokens, 8 tokens generated greedily" in result.acceptance_set


class _Miscompiled(nn.Module):
    """Computes differently under torch.compile than in eager: its second layer adds a small
    bias only while being compiled, as a silent miscompile would."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(16, 32)
        self.act = nn.GELU()
        self.planted = _Planted(32, 32)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.planted(self.act(self.first(x))))


class _Planted(nn.Linear):
    def forward(self, x):
        out = super().forward(x)
        if torch.compiler.is_compiling():
            out = out + 1e-3
        return out


def test_a_planted_miscompile_fails_the_r_ratio_at_the_planted_layer_as_its_own():
    workload = classifier("miscompiled", _Miscompiled, 16)
    settings = NumericsSettings(
        precisions=(),
        compiled_precisions=("fp32",),
        informative_precisions=(),
        steps=2,
        convergence_steps=3,
    )
    result = numerics.run_numerics(workload, CPU, settings, log=lambda _: None)
    run = result.run("cpu fp32 compiled")
    failure = run.acceptance.first_ratio_failure
    assert failure.layer == "planted" and failure.cause == OWN and failure.own_ratio > 1.2
    r_gate = _gate(run.acceptance.gates, R_RATIO)
    assert r_gate.status == GATE_FAIL
    # Every layer above the threshold re-run alone: the one fault is the one failing component.
    assert r_gate.measured.startswith("1 of 4 components fail alone (planted (_Planted)")
    assert "inherited (R alone <= 1.2: head)" in r_gate.measured
    assert run.verdict.status == BLOCKER
    assert wording.headline(result).startswith("Acceptance: R-ratio fails first")


def _evaluation_workload(evaluate):
    workload = load_workload("seed-mlp")
    workload.downstream_eval = evaluate
    return workload


def _accuracy(predict):
    inputs, targets = load_workload("seed-mlp").batch_maker(64, torch.Generator().manual_seed(9))
    return {"held-out accuracy": float((predict(inputs).argmax(-1) == targets).float().mean())}


def test_the_downstream_evaluation_is_reported_per_run_and_one_that_raises_is_one_sentence():
    result = numerics.run_numerics(_evaluation_workload(_accuracy), CPU, QUICK, log=lambda _: None)
    for run in result.target_runs:
        score = run.acceptance.downstream
        assert score.reference.keys() == score.run.keys() == {"held-out accuracy"}
        assert _gate(run.acceptance.gates, DOWNSTREAM).status == GATE_PASS

    def broken(predict):
        raise RuntimeError("the evaluation server is down")

    settings = NumericsSettings(
        precisions=("fp32",),
        compiled_precisions=(),
        informative_precisions=(),
        steps=2,
        convergence_seeds=1,
        convergence_steps=3,
    )
    result = numerics.run_numerics(_evaluation_workload(broken), CPU, settings, log=lambda _: None)
    raised = [n for n in result.notes if "raised on the reference" in n]
    assert len(raised) == 1 and raised[0].count(". ") == 0
    assert any(n.startswith("convergence_seeds is 1: olympic scoring") for n in result.notes)
    (run,) = result.target_runs
    statuses = {g.gate: g.status for g in run.acceptance.gates}
    assert statuses[DOWNSTREAM] == statuses[CONVERGENCE] == GATE_NOT_JUDGED
    assert statuses[R_RATIO] == statuses[TOP1] == GATE_PASS and run.verdict.status == PASS
