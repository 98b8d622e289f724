"""Retuning (notebook 04's package side) in-process: failure texts, search bounds, plans,
buckets, loader settings, launch planning and cost. The stages with real child processes and
torchrun launches are tested in tests/e2e/test_tuning_e2e.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import combinations
from pathlib import Path

import pytest
import torch

from tests.fixtures.retune_results import search_only_result
from tests.fixtures.tuning_workloads import failing_workloads
from workbench.baseline.records import LedgerEntry
from workbench.environment.instance import InstanceType
from workbench.errors import BadInput
from workbench.processes import (
    EXITED,
    FINISHED,
    ChildOutcome,
)
from workbench.scorecard import ATTENTION, BLOCKER
from workbench.targets.cpu import CpuTarget
from workbench.targets.cuda import CudaTarget
from workbench.targets.neuron import NeuronTarget
from workbench.targets.out_of_memory import neuron_compiler_host_oom
from workbench.targets.xla import XlaTarget
from workbench.timing import Measurement
from workbench.tuning import views
from workbench.tuning.buckets import evaluate, optimal_boundaries, plan_buckets, read_lengths
from workbench.tuning.cost import MEASURED, cost_study, load_prices
from workbench.tuning.dataloader import (
    WAIT_SHARE_LIMIT,
    LoaderResult,
    LoaderSetting,
    loader_settings,
)
from workbench.tuning.parallel import OK as RUN_OK
from workbench.tuning.parallel import (
    SKIPPED,
    ScalingRun,
    choose_world_size,
    sweep_world_sizes,
)
from workbench.tuning.plan import (
    LINEAR,
    NO_RULE,
    SQRT,
    check_accumulation,
    lr_factor,
    lr_scaling_rule,
    plan_global_batch,
    split_global_batch,
)
from workbench.tuning.records import (
    RetuneSettings,
    result_data,
    retuning_verdict,
)
from workbench.tuning.retune import run_retuning
from workbench.tuning.trials import (
    COMPILER_HOST_RAM,
    ERROR,
    OK,
    OOM,
    OVER_BUDGET,
    SEARCH,
    SEARCH_STEADY_STEPS,
    MemoryBudget,
    SearchResult,
    Trial,
    TrialFailed,
    choose_batch,
    classify,
    power_of_two_sizes,
    search_largest_batch,
    trial_bound,
)
from workbench.workload import WorkloadSpec, load_workload


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with failing_workloads(tmp_path_factory.mktemp("tuning_fixtures")) as module:
        yield module


# ---------------------------------------------------------------------------------------------
# Trial outcomes


def test_oom_texts_are_recognised_per_target() -> None:
    host = "RuntimeError: [enforce fail] DefaultCPUAllocator: can't allocate memory: 1 bytes"
    cuda = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    runtime = 'nrt_tensor_allocate status=4 message="Allocation Failure" on nc 0'
    compiler_hbm = "Allocated memory out of bound for the graph"
    xla = "RESOURCE_EXHAUSTED: Out of memory allocating 4294967296 bytes"
    not_memory = "ValueError: reshape expects a batch divisible by 3"
    for target in (CpuTarget, CudaTarget, XlaTarget, NeuronTarget):
        assert target.out_of_memory_evidence(host), target.name
        assert target.out_of_memory_evidence(not_memory) is None, target.name
    assert CudaTarget.out_of_memory_evidence(cuda) == "CUDA out of memory"
    assert CpuTarget.out_of_memory_evidence(cuda) is None
    for text in (runtime, compiler_hbm):
        assert NeuronTarget.out_of_memory_evidence(text), text
        assert XlaTarget.out_of_memory_evidence(text), text
        assert CpuTarget.out_of_memory_evidence(text) is None, text
    assert XlaTarget.out_of_memory_evidence(xla)
    # The compiler killed for host RAM is named by compiler_host_oom, not read as a device OOM.
    for text in COMPILER_HOST_RAM_TEXTS:
        for target in (NeuronTarget, XlaTarget):
            assert target.out_of_memory_evidence(text) is None, (target.name, text)
            assert target.compiler_host_oom(text), (target.name, text)
        assert CpuTarget.compiler_host_oom(text) is None, text
    for text in DEVICE_OOM_TEXTS:
        assert NeuronTarget.compiler_host_oom(text) is None, text


# Neuron's texts, for trials that cannot run here (no Trainium, no neuronx-cc). The compiler
# killed for host RAM as neuron.md section 6 item 7 documents it ("[F137] ... insufficient system
# memory", or killed with -9; the F137 wording is that of the reports peers_and_pain_points.md P4
# cites), raised as torch-neuronx would raise the compiler's failure. neuron.md documents no
# device out-of-memory text: these are the runtime and compiler forms methods.md e2 lists.
COMPILER_HOST_RAM_TEXTS = (
    "RuntimeError: neuronx-cc failed: [F137] neuronx-cc was forcibly killed - insufficient "
    "system memory",
    "subprocess.CalledProcessError: Command '['neuronx-cc', 'compile', 'model.hlo.pb']' died "
    "with <Signals.SIGKILL: 9>.",
    "RuntimeError: neuronx-cc returned non-zero exit status -9.",
)
DEVICE_OOM_TEXTS = (
    'RuntimeError: nrt_tensor_allocate status=4 message="Allocation Failure" on nc 0',
    "RuntimeError: Failed to allocate 1073741824 bytes on DEVICE",
    "RuntimeError: neuronx-cc failed: Allocated memory out of bound for the graph",
)


def _failed_outcome(text: str, *, reported: bool = True) -> ChildOutcome:
    """A trial child that failed with `text`: as its reported error (the step raised it), or
    only in its output when it exited without reporting."""
    if reported:
        return ChildOutcome(FINISHED, {"error": text, "items_per_step": 64}, 0, 2.0, "")
    return ChildOutcome(EXITED, None, 1, 2.0, f"compiling graph ...\n{text}\n")


@pytest.mark.parametrize("reported", [True, False])
@pytest.mark.parametrize("text", COMPILER_HOST_RAM_TEXTS)
def test_a_trial_whose_compiler_is_killed_for_host_ram_is_not_out_of_memory(
    text: str, reported: bool
) -> None:
    """Fake outcomes with the documented compiler texts (module constants above): the real
    compiler cannot run here. The trial keeps its own status and 01's remedy sentence."""
    budget = MemoryBudget(16 * 2**30, "test", 0.1)
    trial = classify(SEARCH, 64, _failed_outcome(text, reported=reported), NeuronTarget(), budget)
    assert trial.status == COMPILER_HOST_RAM and trial.status != OOM and not trial.fits
    assert trial.oom_evidence is None
    # The same sentence notebook 01 gives (neuron_compiler_host_oom), with its remedy.
    assert trial.diagnosis == neuron_compiler_host_oom(text)
    assert trial.diagnosis and trial.diagnosis.startswith("neuronx-cc ran out of host memory")
    assert "fewer parallel compile jobs" in trial.diagnosis
    assert "more host RAM" in trial.diagnosis
    assert trial.diagnosis in trial.line() and COMPILER_HOST_RAM in trial.line()


@pytest.mark.parametrize("reported", [True, False])
@pytest.mark.parametrize("text", DEVICE_OOM_TEXTS)
def test_a_trial_with_a_device_out_of_memory_text_is_still_out_of_memory(
    text: str, reported: bool
) -> None:
    """Fake outcomes with the documented device texts (module constants above)."""
    budget = MemoryBudget(16 * 2**30, "test", 0.1)
    trial = classify(SEARCH, 64, _failed_outcome(text, reported=reported), NeuronTarget(), budget)
    assert trial.status == OOM and trial.oom_evidence and trial.oom_evidence in text
    assert trial.diagnosis is None


class FakeNeuronRunner:
    """Stands in for TrialRunner on Neuron: each batch's outcome carries a documented text
    (device OOM above `device_limit`; the compiler killed for host RAM in `killed`), and is
    classified as a real trial's is."""

    def __init__(self, device_limit: int, killed: range) -> None:
        self.device_limit, self.killed = device_limit, killed
        self.budget = MemoryBudget(16 * 2**30, "test", 0.1)

    def run(self, stage: str, batch_size: int, *_: object) -> Trial:
        if batch_size in self.killed:
            outcome = _failed_outcome(COMPILER_HOST_RAM_TEXTS[0])
        elif batch_size > self.device_limit:
            outcome = _failed_outcome(DEVICE_OOM_TEXTS[0])
        else:
            steady = [0.01] * SEARCH_STEADY_STEPS
            outcome = ChildOutcome(
                FINISHED, {"steady_times": steady, "items_per_step": batch_size}, 0, 1.0, ""
            )
        return classify(stage, batch_size, outcome, NeuronTarget(), self.budget)


@pytest.mark.parametrize(
    ("device_limit", "killed", "largest", "smallest_failure", "stopped_at"),
    [
        (10_000, range(1000, 10_000), 1, None, 1000),  # the top end's compile is killed
        (10_000, range(1, 10_000), None, None, 1),  # even the smallest batch's compile
        (700, range(400, 700), 1, 1000, 500),  # killed while bisecting below a device OOM
    ],
)
def test_the_search_stops_at_a_compile_killed_for_host_ram(
    device_limit: int,
    killed: range,
    largest: int | None,
    smallest_failure: int | None,
    stopped_at: int,
) -> None:
    """A compiler killed for host RAM neither bounds the search as the device's limit nor is
    bisected below: the search ends there, says why and carries the remedy."""
    fake = FakeNeuronRunner(device_limit, killed)
    result = search_largest_batch(fake, 1, 1000)  # type: ignore[arg-type]
    last = result.trials[-1]
    assert (last.batch_size, last.status) == (stopped_at, COMPILER_HOST_RAM)
    assert [t.status for t in result.trials].count(COMPILER_HOST_RAM) == 1
    assert result.compiler_host_ram == stopped_at
    assert (result.largest_fit, result.smallest_failure) == (largest, smallest_failure)
    assert f"the search stopped at batch {stopped_at}" in result.stopped
    assert "not the device's memory limit" in result.stopped
    assert last.diagnosis and last.diagnosis in result.stopped
    # A device OOM still bounds the search as before.
    plain = search_largest_batch(FakeNeuronRunner(700, range(0)), 1, 1000)  # type: ignore[arg-type]
    assert (plain.largest_fit, plain.smallest_failure, plain.compiler_host_ram) == (700, 701, None)
    assert {t.status for t in plain.trials} == {OK, OOM}


@pytest.mark.parametrize("killed", [range(1000, 10_000), range(1, 10_000)])
def test_headline_table_and_result_file_name_the_compiler_host_ram_stop(
    killed: range, capsys: pytest.CaptureFixture[str]
) -> None:
    """What 04 shows and keeps of a search the compiler's host RAM stopped (fake Neuron
    outcomes with the documented F137 text, as above)."""
    search = search_largest_batch(FakeNeuronRunner(10_000, killed), 1, 1000)  # type: ignore[arg-type]
    result = search_only_result(search)
    killed_trial = search.trials[-1]
    remedy = killed_trial.diagnosis or ""
    assert "fewer parallel compile jobs" in remedy
    headline = result.headline()
    assert COMPILER_HOST_RAM in headline and remedy in headline
    assert "no batch size from" not in headline, "the device's limit was not found"
    views.headline(result)
    views.search(result)
    shown = capsys.readouterr().out
    # The headline box takes the verdict's colour: red where nothing fits, yellow otherwise.
    kind = "fail" if search.largest_fit is None else "warn"
    assert f"[{kind}] {headline}" in shown
    table = shown[shown.index("Search trials, in order") :]
    killed_row = next(line for line in table.splitlines() if COMPILER_HOST_RAM in line)
    assert remedy in killed_row, "the trial table's 'why' column carries the remedy"
    data = json.loads(json.dumps(result_data(result), default=str))
    stored = data["search"]["trials"][-1]
    assert stored["status"] == COMPILER_HOST_RAM and stored["diagnosis"] == remedy
    assert stored["fits"] is False
    assert data["search"]["compiler_host_ram_batch"] == killed_trial.batch_size
    assert remedy in data["search"]["stopped"] and data["headline"] == headline
    verdict = retuning_verdict(result)
    assert verdict.status == (BLOCKER if search.largest_fit is None else ATTENTION)
    assert any(remedy in f.reason for f in verdict.findings)


def test_a_trial_that_recompiles_while_timed_draws_attention_and_one_that_does_not_passes() -> None:
    def trial(batch: int, steady_recompile: bool) -> Trial:
        made = Trial(SEARCH, batch, OK, 1.0)
        made.compiles = [
            LedgerEntry("train", "compiled", "first_call", 1, "0/0", "first compile", 2.0)
        ]
        if steady_recompile:
            made.compiles.append(
                LedgerEntry(
                    "train", "compiled", "steady", 9, "0/1", "guard failure", 1.5,
                    detail="tensor 'x' size mismatch at index 0. expected 4, actual 3",
                )
            )  # fmt: skip
        return made

    clean = search_only_result(SearchResult(1, 8, 5, trials=[trial(8, False)], largest_fit=8))
    assert retuning_verdict(clean).status == "pass"
    noisy = search_only_result(
        SearchResult(1, 8, 5, trials=[trial(8, False), trial(4, True)], largest_fit=8)
    )
    verdict = retuning_verdict(noisy)
    assert verdict.status == ATTENTION
    assert "recompiled during steady state, first at batch 4: guard failure at step 9" in (
        verdict.findings[0].reason
    )


class FakeRunner:
    """Stands in for TrialRunner: a batch fits up to `limit`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def run(self, stage: str, batch_size: int, *_: object) -> Trial:
        return Trial(stage, batch_size, OK if batch_size <= self.limit else OOM, 0.0)


@pytest.mark.parametrize("low, high", [(1, 1), (1, 2), (1, 1000), (3, 97), (1, 4096), (8, 8192)])
def test_search_is_exact_within_ceil_log2_range_plus_two(low: int, high: int) -> None:
    for limit in sorted({low - 1, low, low + 1, (low + high) // 3, high - 1, high, high + 5}):
        result = search_largest_batch(FakeRunner(limit), low, high)  # type: ignore[arg-type]
        assert len(result.trials) <= trial_bound(low, high)
        expected = None if limit < low else min(limit, high)
        assert result.largest_fit == expected
        if expected is not None and expected < high:
            assert result.smallest_failure == expected + 1


class BrokenRunner(FakeRunner):
    """Every batch above `limit` runs out of memory; `broken` fails with an IndexError."""

    def __init__(self, limit: int, broken: set[int]) -> None:
        super().__init__(limit)
        self.broken = broken

    def run(self, stage: str, batch_size: int, *_: object) -> Trial:
        if batch_size in self.broken:
            return Trial(
                stage,
                batch_size,
                ERROR,
                0.0,
                error="IndexError: index 3 out of range",
                location="workbench/workloads/script.py:880 in _repeated",
            )
        return super().run(stage, batch_size)


def test_a_search_whose_first_trial_errors_fails_naming_the_error_not_memory() -> None:
    """Must fail: nothing ran, and not for memory: no "no batch size fits" finding."""
    with pytest.raises(TrialFailed, match="batch 1 failed, not for lack of memory: IndexError"):
        search_largest_batch(BrokenRunner(64, {1}), 1, 1000)  # type: ignore[arg-type]
    # Must pass: an error at a size beyond what fits stays a trial of the search.
    result = search_largest_batch(BrokenRunner(64, {1000}), 1, 1000)  # type: ignore[arg-type]
    assert result.largest_fit == 64


def test_bad_input_is_rejected_before_any_trial_runs(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="min_batch"):
        search_largest_batch(FakeRunner(4), 8, 4)  # type: ignore[arg-type]
    with pytest.raises(BadInput, match="min_batch"):
        RetuneSettings(min_batch=8, max_batch=4)
    with pytest.raises(BadInput, match="dataloader_workers"):
        RetuneSettings(dataloader_workers=(-1,))
    lines: list[str] = []
    broken = tmp_path / "prices.json"
    broken.write_text("{not json")
    with pytest.raises(BadInput, match="prices file"):
        run_retuning(
            WorkloadSpec("seed-mlp"),
            load_workload("seed-mlp"),
            CpuTarget(),
            RetuneSettings(prices_file=str(broken)),
            log=lines.append,
        )
    assert lines == []


def test_batch_choice_prefers_the_smallest_batch_near_the_best() -> None:
    def trial(batch: int, step: float, status: str = OK) -> Trial:
        return Trial("sweep", batch, status, 0.0, Measurement([step] * 3), batch)

    trials = [trial(8, 1.0), trial(16, 1.0), trial(32, 1.01), trial(64, 2.0, OVER_BUDGET)]
    choice = choose_batch(trials)
    assert (choice.batch_size, choice.best_batch_size) == (32, 32)
    # 16 is within 5% of the best rate of 32 only when the best is barely better.
    trials[2] = trial(32, 1.9)
    assert choose_batch(trials).batch_size == 16
    assert power_of_two_sizes(3, 40) == [4, 8, 16, 32]


# ---------------------------------------------------------------------------------------------
# Global batch, learning rate and accumulation


def test_lr_rules_follow_the_optimizer_family() -> None:
    params = [torch.nn.Parameter(torch.zeros(1))]
    assert lr_scaling_rule(torch.optim.SGD(params, lr=0.1))[0] == LINEAR
    assert lr_scaling_rule(torch.optim.AdamW(params))[0] == SQRT
    assert lr_scaling_rule(torch.optim.Adam(params))[0] == SQRT
    assert lr_scaling_rule(torch.optim.Adagrad(params))[0] == NO_RULE
    assert lr_factor(LINEAR, 1024, 256) == 4
    assert lr_factor(SQRT, 1024, 256) == 2
    assert lr_factor(NO_RULE, 1024, 256) is None
    assert lr_factor(NO_RULE, 256, 256) == 1


def test_global_batch_splits_into_per_core_workers_and_accumulation() -> None:
    assert split_global_batch(4096, 2, 512) == (512, 4)
    assert split_global_batch(64, 2, 1024) == (32, 1)
    assert split_global_batch(3, 4, 64) == (1, 1)
    sgd = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    plan = plan_global_batch("t", 4096, 512, 2, 256, sgd)
    assert (
        plan.per_core_batch * plan.world_size * plan.accumulation_steps == 4096 == plan.global_batch
    )
    assert plan.exact and plan.lr_rule == LINEAR
    assert plan.suggested_lr == pytest.approx(0.1 * 16)
    assert any("no_sync" in note for note in plan.notes)
    odd = plan_global_batch("t", 1000, 128, 3, 1000, sgd)
    assert not odd.exact and odd.per_core_batch <= 128
    assert abs(odd.global_batch - 1000) <= 3 * odd.accumulation_steps
    assert odd.lr_factor == pytest.approx(odd.global_batch / 1000)
    with pytest.raises(BadInput):
        plan_global_batch("t", 0, 128, 1, 64, sgd)


def test_accumulation_matches_one_big_batch_for_seed_mlp() -> None:
    check = check_accumulation(load_workload("seed-mlp"), micro_batch=16, steps=4)
    assert check.passed, check.explanation()
    assert check.max_relative_error is not None and check.max_relative_error < check.tolerance
    assert not check.batch_statistics_layers


def test_accumulation_is_not_equivalent_with_batch_norm(fixtures: str) -> None:
    check = check_accumulation(load_workload(f"{fixtures}:with_batch_norm"), 8, 4)
    assert not check.passed and check.error is None
    assert (check.max_relative_error or 0) > 1e3 * check.tolerance
    assert check.batch_statistics_layers == ["net.1 (BatchNorm1d)"]
    assert "BatchNorm1d" in check.explanation() and "NOT" in check.explanation()


# ---------------------------------------------------------------------------------------------
# Padding buckets


def test_buckets_cover_the_lengths_with_the_stated_waste() -> None:
    lengths = [10] * 50 + [100] * 50
    one = evaluate(lengths, [100])
    assert one.padded_tokens == 100 * 100 and one.waste == pytest.approx(1 - 5500 / 10000)
    study = plan_buckets(lengths, max_buckets=4, waste_limit=0.1, source="test")
    assert [p.boundaries for p in study.plans] == [[100], [10, 100]]
    assert study.chosen.boundaries == [10, 100] and study.chosen.waste == 0
    assert study.chosen.counts == [50, 50]


def test_bucket_boundaries_are_optimal_against_brute_force() -> None:
    generator = torch.Generator().manual_seed(0)
    lengths = [int(v) for v in torch.randint(1, 60, (300,), generator=generator)]
    values = sorted(set(lengths))
    for count in (1, 2, 3):
        best = min(
            evaluate(lengths, [*combo, values[-1]]).padded_tokens
            for combo in combinations(values[:-1], count - 1)
        )
        found = evaluate(lengths, optimal_boundaries(lengths, count))
        assert found.padded_tokens == best
        assert found.boundaries[-1] == max(lengths)


def test_sequence_lengths_come_from_the_list_or_a_file(tmp_path: Path) -> None:
    assert read_lengths([5, 7], "")[0] == [5, 7]
    path = tmp_path / "lengths.txt"
    path.write_text("5\n9\n12\n")
    assert read_lengths([], str(path))[0] == [5, 9, 12]
    path.write_text(json.dumps([3, 4]))
    assert read_lengths([], str(path))[0] == [3, 4]
    path.write_text("five")
    with pytest.raises(BadInput, match="sequence_lengths_file"):
        read_lengths([], str(path))
    with pytest.raises(BadInput):
        plan_buckets([0, 5], 2, 0.1, "test")


# ---------------------------------------------------------------------------------------------
# DataLoader workers


def test_wait_share_leaves_out_a_step_that_other_load_stalled_but_not_a_starved_supply() -> None:
    """The CI failure this guards: one worker, hand-over waits of 2 ms on 200 ms steps, and one
    step where other load held the process for about 110 ms: the whole-run share came to 5.2%
    and the sweep recommended nothing. A supply that falls behind every step, or every other
    step (two workers finishing together), must still count in full."""
    one_worker = LoaderSetting(1, False, 2)
    steps = [0.202] * 9 + [0.312]
    stalled = LoaderResult(one_worker, "ok", Measurement([0.002] * 9 + [0.112]), Measurement(steps))
    assert stalled.steps is not None and stalled.steps.discarded == [9]
    assert stalled.wait_share == pytest.approx(0.002 / 0.202)
    assert stalled.wait_share < WAIT_SHARE_LIMIT

    starved = LoaderResult(one_worker, "ok", Measurement([0.05] * 10), Measurement([0.25] * 10))
    assert starved.wait_share == pytest.approx(0.2)
    every_other = LoaderResult(
        one_worker, "ok", Measurement([0.1, 0.0] * 5), Measurement([0.3, 0.2] * 5)
    )
    assert every_other.wait_share == pytest.approx(0.2)
    assert min(starved.wait_share, every_other.wait_share) > WAIT_SHARE_LIMIT


def test_loader_settings_pair_prefetching_with_workers_and_pinning_with_the_device() -> None:
    assert [s.label() for s in loader_settings([1, 0], [2, 4], pin_memory_helps=True)] == [
        "0 worker(s)",
        "0 worker(s), pinned",
        "1 worker(s), prefetch 2",
        "1 worker(s), prefetch 4",
        "1 worker(s), prefetch 2, pinned",
        "1 worker(s), prefetch 4, pinned",
    ]


# ---------------------------------------------------------------------------------------------
# Data-parallel launches


def test_world_sizes_beyond_the_machine_are_skipped_with_a_reason() -> None:
    target = CpuTarget()
    too_many = target.max_data_parallel_workers() + 1
    study = sweep_world_sizes(
        WorkloadSpec("seed-mlp"),
        target,
        16,
        [too_many],
        items_per_sample=1,
        warmup_steps=1,
        steps=3,
        timeout_s=10,
    )
    (run,) = study.runs
    assert run.status == SKIPPED and "oversubscription" in run.reason
    assert choose_world_size(study, 0.7) is None


class XlaOnCpu(XlaTarget):
    """XlaTarget as it stands on PJRT_DEVICE=CPU (xla_cpu.md: collectives abort there), built
    without torch_xla: only the facts the scaling sweep reads are filled in."""

    def __init__(self) -> None:  # no torch_xla device here
        pass

    @property
    def is_trainium(self) -> bool:
        return False

    def max_data_parallel_workers(self) -> int:
        return 2


def test_scaling_is_skipped_with_the_reason_where_collectives_cannot_run() -> None:
    study = sweep_world_sizes(
        WorkloadSpec("seed-mlp"),
        XlaOnCpu(),
        16,
        [1, 2],
        items_per_sample=1,
        warmup_steps=1,
        steps=3,
        timeout_s=10,
    )
    assert study.skipped_reason and "XLA:CPU" in study.skipped_reason
    assert [r.status for r in study.runs] == [SKIPPED, SKIPPED]
    assert study.backend == "xla"


def test_cpu_target_facts_for_retuning(monkeypatch: pytest.MonkeyPatch) -> None:
    target = CpuTarget()
    assert target.distributed_backend == "gloo" and target.collectives().available
    assert target.device_memory() is None
    assert target.max_data_parallel_workers() >= 1
    assert target.rank_environment(1) == {}
    monkeypatch.delenv("NEURON_RT_VISIBLE_CORES", raising=False)
    assert NeuronTarget.rank_environment(1) == {"NEURON_RT_VISIBLE_CORES": "1"}
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "4-7")
    assert NeuronTarget.rank_environment(2) == {"NEURON_RT_VISIBLE_CORES": "6"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert CudaTarget.rank_environment(1) == {"CUDA_VISIBLE_DEVICES": "5"}
    with pytest.raises(ValueError, match="rank 2 has no device"):
        CudaTarget.rank_environment(2)


# ---------------------------------------------------------------------------------------------
# Prices and cost


def test_the_packaged_price_table_holds_only_rows_with_an_aws_source() -> None:
    prices = load_prices()
    for row in prices.rows:
        assert row.source.startswith("https://aws.amazon.com") or "Price List" in row.source
        assert row.date[:4].isdigit() and row.usd_per_hour > 0 and row.accelerators >= 1
    # An instance without a trusted price is listed, never given a guessed one.
    priced = {row.instance for row in prices.rows}
    assert "trn1.32xlarge" in prices.not_found or "trn1.32xlarge" in priced


def _price_file(tmp_path: Path) -> str:
    path = tmp_path / "my-prices.json"
    row = {
        "instance": "trn1.2xlarge",
        "pricing": "negotiated",
        "usd_per_hour": 2.0,
        "accelerator": "NeuronCore-v2",
        "accelerators": 2,
        "source": "our contract",
        "date": "2026-11",
    }
    path.write_text(json.dumps({"instances": [row]}))
    return str(path)


def test_cost_prices_only_the_instance_the_run_measured(tmp_path: Path) -> None:
    prices = load_prices(_price_file(tmp_path))
    two = ScalingRun(2, RUN_OK, step=Measurement([0.0125] * 3), items_per_step=200)
    two.efficiency = 0.8

    def study(instance: InstanceType, world: ScalingRun | None = two):
        return cost_study(
            prices,
            per_worker_rate=10_000.0,
            per_worker_basis="test",
            world=world,
            instance=instance,
            target_name="cpu",
            unit="samples",
            items=1_000_000,
        )

    priced = study(InstanceType("trn1.2xlarge", "instance_type parameter"))
    assert len(priced.rows) == 1, "no row may price hardware this run did not run on"
    row = priced.rows[0]
    assert row.basis == MEASURED and row.items_per_second == pytest.approx(16_000)
    assert row.usd_per_hour == 2.0
    assert row.items_per_dollar == pytest.approx(16_000 * 3600 / 2.0)
    assert row.dollars_for_items == pytest.approx(1_000_000 / 16_000 / 3600 * 2.0)
    # The table prices the recommended width, and says which: its caption reads world_size.
    assert (priced.world_size, row.workers) == (2, 2) and "world size 2" in row.how
    single = study(InstanceType("trn1.2xlarge", "instance_type parameter"), world=None)
    assert (single.world_size, single.rows[0].items_per_second) == (1, 10_000.0)
    assert "one worker" in single.rows[0].how
    unpriced = study(InstanceType("m7i.large", "EC2 instance metadata (IMDSv2)"))
    assert unpriced.rows[0].usd_per_hour is None and unpriced.rows[0].items_per_dollar is None
    assert "no price for m7i.large" in unpriced.price_note
    unknown = study(InstanceType(None, "not an EC2 instance (no EC2 DMI data)"))
    assert unknown.rows[0].instance == "this machine"
    assert "instance type unknown" in unknown.price_note
    broken = tmp_path / "prices.json"
    broken.write_text(json.dumps({"instances": [{"instance": "x", "usd_per_hour": 1}]}))
    with pytest.raises(BadInput, match="source"):
        load_prices(str(broken))


def _headline_for(plan_global: int, reference_global: int) -> str:
    from workbench.tuning.plan import plan_global_batch
    from workbench.tuning.records import Recommendation, RetuneResult
    from workbench.tuning.trials import BatchChoice, MemoryBudget, SearchResult

    model = torch.nn.Linear(4, 2)
    plan = plan_global_batch(
        "keep", plan_global, 256, 1, reference_global, torch.optim.AdamW(model.parameters())
    )
    result = RetuneResult(
        workload={}, target={"name": "cpu"}, measured_label="measured on this machine (cpu)",
        settings=RetuneSettings(), throughput_unit="samples/s",
        budget=MemoryBudget(2**30, "test", 0.1),
        search=SearchResult(1, 1024, 12, [], 1024, None, "fits"), sweep=[],
        choice=BatchChoice(256, 13_000.0, 512, 13_200.0, "within 5% of the best"),
        scaling=None, world=None, plans=[plan], accumulation=None, loader=None, buckets=None,
        cost=None, recommendation=Recommendation(), skipped={}, wall_seconds=1.0,
    )  # fmt: skip
    return result.headline()


def test_headline_says_why_the_plan_differs_from_the_fastest_batch():
    kept = _headline_for(64, 64)
    assert "chosen per-core batch is 256, 13,000 samples/s in its steady state" in kept
    assert "the smallest that its noise cannot tell from the fastest, 512 at 13,200" in kept
    assert "the plan is 64 per core x 1 worker(s) x 1 accumulation step(s) = 64, not 256" in kept
    assert "because it keeps the recipe's global batch of 64" in kept
    assert "not 256 per core" not in _headline_for(512, 64), "no reason needed when they agree"
    other = _headline_for(96, 64)
    assert "= 96, not 256 per core, to reach the global batch of 96" in other
