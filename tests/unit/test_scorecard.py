"""Every verdict rule, on a case that must pass and cases that must not."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tests.fixtures.custom_ops import double_it
from tests.fixtures.user_workloads import LinearHead
from workbench.baseline.records import (
    COMPILED,
    EAGER,
    PHASE_FIRST_CALL,
    PHASE_STEADY,
    PHASE_WARMUP,
    TRAIN,
    ConfigResult,
    CounterDelta,
    LedgerEntry,
    MemoryUse,
    PhaseResult,
    StepFailure,
    baseline_verdict,
)
from workbench.coverage import analyze_coverage
from workbench.coverage.records import coverage_verdict
from workbench.environment.drift import CRITICAL, WARNING, Drift
from workbench.environment.records import environment_verdict
from workbench.environment.releases import ReleaseMatch
from workbench.results import LEAD, SCHEMA_VERSION, UnreadableResult
from workbench.scorecard import (
    ATTENTION,
    BLOCKER,
    PASS,
    Finding,
    Verdict,
    judge,
    top_reasons,
)
from workbench.summary import NotebookOutcome, NotebookVerdict, judge_run
from workbench.targets.cpu import CpuTarget
from workbench.timing import Measurement
from workbench.tuning.records import retuning_verdict
from workbench.workload import load_workload


def test_judge_leads_with_the_worst_finding_and_counts_the_rest() -> None:
    verdict = judge(
        [Finding(ATTENTION, "a"), Finding(BLOCKER, "b"), Finding(PASS, "fine")], "rule", "ok"
    )
    assert (verdict.status, verdict.reason) == (BLOCKER, "b (and 1 more finding)")
    assert judge([], "rule", "nothing found").status == PASS


def test_run_verdict_is_the_worst_and_an_unfinished_notebook_blocks() -> None:
    ok = NotebookOutcome("00", "ok", verdict=NotebookVerdict(PASS, "fine"))
    warn = NotebookOutcome("01", "ok", verdict=NotebookVerdict(ATTENTION, "noisy"))
    assert judge_run([ok], []).status == PASS and judge_run([ok], []).reasons == []
    assert judge_run([ok, warn], []).reasons == ["01: noisy"]
    died = NotebookOutcome("02", "kernel-died")
    result = judge_run([ok, warn, died], [])
    assert result.status == BLOCKER and result.reasons[0] == "02: did not finish (kernel-died)"
    unjudged = NotebookOutcome("03", "ok")
    assert judge_run([ok, unjudged], []).status == PASS
    unreadable = NotebookOutcome("05", "ok", unreadable_result="result file unreadable: too big")
    assert judge_run([ok, unreadable], []).reasons == ["05: result file unreadable: too big"]


def test_top_reasons_lead_with_blockers_and_say_how_many_were_cut() -> None:
    findings = [Finding(ATTENTION, f"a{i}") for i in range(3)] + [Finding(BLOCKER, "b")]
    assert top_reasons(findings) == ["b", "a0", "a1", "and 1 more"]
    assert top_reasons([Finding(PASS, "fine")]) == []


def test_a_stored_verdict_reads_back_typed_and_a_malformed_one_is_one_sentence() -> None:
    def record(data: dict) -> dict:
        return {"schema_version": SCHEMA_VERSION, "notebook": "01_baseline", "data": data}

    finding = {"status": ATTENTION, "reason": "noisy"}
    stored = {"status": BLOCKER, "reason": "r", "rule": "x", "findings": [finding]}
    lead = LEAD.read(record({"verdict": stored, "headline": "h"}), "01_baseline.json")
    assert lead.verdict == Verdict(BLOCKER, "r", "x", [Finding(ATTENTION, "noisy")])
    assert lead.headline == "h"
    assert LEAD.read(record({}), "01_baseline.json").verdict is None  # judged nothing
    with pytest.raises(UnreadableResult, match=r"data\.verdict\.status is 'great'; expected one"):
        LEAD.read(record({"verdict": {**stored, "status": "great"}}), "01_baseline.json")


# --- 01 -------------------------------------------------------------------------------------


def _config(mode: str, steady: list[float], recompiles: int = 0, **fields) -> ConfigResult:
    def phase(name: str, start: int, times: list[float], graphs: int = 0) -> PhaseResult:
        return PhaseResult(
            name, start, Measurement(times), MemoryUse(None, None, None), CounterDelta(graphs, 0.0)
        )

    phases = [
        phase(PHASE_FIRST_CALL, 1, [0.01]),
        phase(PHASE_WARMUP, 2, [0.001] * 4),
        phase(PHASE_STEADY, 6, steady, recompiles),
    ]
    phases[1].converged = True
    return ConfigResult(TRAIN, mode, 8, 8, phases, **fields)


def _baseline(*configs: ConfigResult) -> SimpleNamespace:
    return SimpleNamespace(configs=list(configs), reference=SimpleNamespace(error=None))


def test_baseline_passes_clean_steps() -> None:
    verdict = baseline_verdict(_baseline(_config(EAGER, [0.001] * 10)))
    assert verdict.status == PASS, verdict.reason


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (_config(EAGER, [0.001] * 10, nonfinite_step=6), "NaN/Inf at step 6"),
        (_config(COMPILED, [0.001] * 10, recompiles=2), "2 recompile(s) during steady state"),
        (
            _config(
                EAGER,
                [0.001] * 10,
                failure=StepFailure(TRAIN, EAGER, PHASE_WARMUP, 3, "ValueError: boom", "x.py:1"),
            ),
            "boom",
        ),
    ],
)
def test_baseline_blocks_nan_recompiles_and_raised_steps(config, expected) -> None:
    verdict = baseline_verdict(_baseline(_config(EAGER, [0.001] * 10), config))
    assert verdict.status == BLOCKER and expected in verdict.reason


def test_a_steady_state_recompile_blocks_with_its_cause_in_reason_and_headline() -> None:
    guard = "0/0: tensor 'x' size mismatch at index 0. expected 8, actual 9"
    entry = LedgerEntry(TRAIN, COMPILED, PHASE_STEADY, 9, "0/1", "new input shape", 0.2, guard)
    recompiling = _config(COMPILED, [0.001] * 10, recompiles=1, ledger=[entry])
    verdict = baseline_verdict(_baseline(recompiling))
    assert verdict.status == BLOCKER
    assert (
        "new input shape at step 9" in verdict.reason and "expected 8, actual 9" in verdict.reason
    )
    # The same ledger entry outside steady state (the first call compiles) is no finding.
    first = LedgerEntry(TRAIN, COMPILED, PHASE_FIRST_CALL, 1, "0/0", "first compile", 0.2)
    assert (
        baseline_verdict(_baseline(_config(COMPILED, [0.001] * 10, ledger=[first]))).status == PASS
    )


def test_baseline_flags_noisy_steady_state_for_attention() -> None:
    noisy = [0.001, 0.001, 0.003, 0.001, 0.004, 0.001, 0.005, 0.001, 0.006, 0.001]
    verdict = baseline_verdict(_baseline(_config(EAGER, noisy)))
    assert verdict.status == ATTENTION and "noisy" in verdict.reason


# --- 00 -------------------------------------------------------------------------------------

NO_NEURON = ReleaseMatch("no-neuron-stack", [], [], "no Neuron packages installed")


def test_environment_passes_without_drift_and_blocks_on_critical_drift() -> None:
    assert environment_verdict(NO_NEURON, None).status == PASS
    assert environment_verdict(NO_NEURON, []).status == PASS
    critical = Drift("packages.torch", "2.9.0", "2.13.0", CRITICAL, "framework")
    verdict = environment_verdict(NO_NEURON, [critical])
    assert verdict.status == BLOCKER and "packages.torch 2.9.0 -> 2.13.0" in verdict.reason
    warning = Drift("packages.tqdm", "4.0", "4.1", WARNING, "dependency")
    assert environment_verdict(NO_NEURON, [warning]).status == ATTENTION
    partial = ReleaseMatch("partial", [], [], "torch-neuronx matches, neuronx-cc does not")
    assert environment_verdict(partial, None).status == ATTENTION


# --- 02 -------------------------------------------------------------------------------------


class _CustomOpModel(LinearHead):
    """seed-mlp's features and classes, through a custom op first."""

    features, classes = 128, 10

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(double_it(x))


def test_coverage_passes_a_supported_model_and_blocks_a_custom_op() -> None:
    mlp = load_workload("seed-mlp")
    report = analyze_coverage(mlp, CpuTarget(), flavours=["xla"], measure=False)
    verdict = coverage_verdict(report, None)
    assert verdict.status == PASS, verdict.reason
    custom = load_workload("seed-mlp")
    custom.model_factory = _CustomOpModel
    report = analyze_coverage(custom, CpuTarget(), flavours=["xla"], measure=False)
    verdict = coverage_verdict(report, None)
    assert verdict.status == BLOCKER and "wbtest::double_it" in verdict.reason


def test_coverage_without_a_table_for_a_flavour_needs_attention() -> None:
    report = analyze_coverage(
        load_workload("seed-mlp"), CpuTarget(), flavours=["native"], measure=False
    )
    verdict = coverage_verdict(report, None)
    assert verdict.status == ATTENTION and "unknown support" in verdict.reason


# --- 04 -------------------------------------------------------------------------------------


def _retune(largest_fit, statuses=(), launches=(), accumulation_passed=True) -> SimpleNamespace:
    trials = [
        SimpleNamespace(status=s, batch_size=2**i, steady_compiles=[])
        for i, s in enumerate(statuses)
    ]
    return SimpleNamespace(
        search=SimpleNamespace(largest_fit=largest_fit, stopped="even batch 1 ran out of memory"),
        trials=trials,
        scaling=SimpleNamespace(
            runs=[SimpleNamespace(status=s, world_size=2**i) for i, s in enumerate(launches)]
        ),
        accumulation=SimpleNamespace(passed=accumulation_passed),
        noisy=list,  # no measurement a choice is read from stayed noisy or ran loaded
        loaded=list,
        plan=None,  # no memory-fit plan: nothing fitting stays a blocker
    )


def test_retuning_passes_when_a_batch_fits_and_everything_ran() -> None:
    assert retuning_verdict(_retune(64, ["ok", "out of memory"], ["ok", "ok"])).status == PASS


def test_retuning_blocks_when_nothing_fits_and_flags_broken_trials() -> None:
    assert retuning_verdict(_retune(None, ["out of memory"])).status == BLOCKER
    broken = retuning_verdict(_retune(64, ["ok", "crashed"], ["ok", "failed"]))
    assert broken.status == ATTENTION and "trial(s) broke" in broken.reason
    mismatch = retuning_verdict(_retune(64, ["ok"], ["ok"], accumulation_passed=False))
    assert mismatch.status == ATTENTION
