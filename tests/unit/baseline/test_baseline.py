"""Baseline measurement: statistics, warm-up rule, phases, failures, NaN, compile, reference.

Real torch and real torch.compile on the CPU. Timing-dependent behaviour (warm-up convergence,
steady-state recompiles) runs against a fake clock that each step advances, so it is
deterministic; nothing here asserts an absolute time.
"""

import itertools
import json
import math

import pytest
import torch
from torch import nn

import workbench.baseline.measure as baseline
from tests.fixtures.baseline_records import baseline_result, timed_config
from tests.fixtures.user_workloads import LinearHead, classifier_workload
from workbench.baseline.checklist import collect_checklist
from workbench.baseline.measure import PreparedStep, measure, run_baseline
from workbench.baseline.records import (
    COMPILED,
    EAGER,
    INFER,
    PHASE_COMPILE,
    PHASE_FIRST_CALL,
    PHASE_STEADY,
    PHASE_WARMUP,
    TRAIN,
    BaselineSettings,
    CompilePayback,
    CounterDelta,
    baseline_verdict,
    cache_state,
    compile_payback,
    result_data,
)
from workbench.baseline.reference import (
    load_reference,
    state_sha256,
    write_reference,
)
from workbench.baseline.views import raise_on_step_failure
from workbench.errors import BadInput, WorkbenchError
from workbench.results import _jsonable, write_json_atomic
from workbench.targets.compiling import (
    CAUSE_FIRST,
    CAUSE_GRAPH_BREAK,
    CAUSE_GUARD,
    CAUSE_NEW_SHAPE,
    CompileCounters,
)
from workbench.targets.cpu import CpuTarget
from workbench.targets.neuron import NeuronTarget
from workbench.timing import (
    ChildPeakRss,
    HostPeakRss,
    Measurement,
    WarmupRule,
    quantile,
    theil_sen_drift,
)
from workbench.workload import Workload, load_workload

QUICK = BaselineSettings(steady_steps=4, warmup=WarmupRule(window=4, threshold=0.5, max_steps=6))


def quiet(_: str) -> None:
    pass


def small_workload(model_factory, name: str = "test-linear") -> Workload:
    return classifier_workload(model_factory, name, batch_size=8)


class CallCounting(nn.Module):
    """Linear(8, 3) that misbehaves from its k-th training call on: NaN outputs, or a raise."""

    def __init__(self, k: int, behaviour: str) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 3)
        self.k, self.behaviour, self.calls = k, behaviour, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.lin(x)
        if not self.training:
            return out
        self.calls += 1
        if self.calls >= self.k and self.behaviour == "nan":
            return out * float("nan")
        if self.calls >= self.k and self.behaviour == "raise":
            raise ValueError(f"boom at call {self.calls}")
        return out


class DataDependent(LinearHead):
    """A branch on a tensor value: Dynamo must break the graph here, so fullgraph fails."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.lin(x)
        return out * 2 if out.sum() > 0 else out


class FakeClock:
    """Stands in for perf_counter; each step advances it by the next scheduled duration."""

    def __init__(self, durations) -> None:
        self.now = 0.0
        self.durations = iter(durations)

    def __call__(self) -> float:
        return self.now

    def tick(self) -> None:
        self.now += next(self.durations)


def fake_prepared(clock: FakeClock, step_body=None) -> PreparedStep:
    def step() -> torch.Tensor:
        clock.tick()
        return step_body() if step_body else torch.tensor(1.0)

    return PreparedStep(TRAIN, EAGER, step, 8, 8, torch.zeros(8), nn.functional.cross_entropy)


# --- statistics -------------------------------------------------------------------------------


def test_a_burst_of_noise_is_left_out_of_the_robust_median_and_kept_raw():
    steady = [0.001 + 0.00001 * (i % 3) for i in range(20)]
    burst = [0.004, 0.006, 0.005, 0.007, 0.009, 0.008, 0.006, 0.005]  # other load, 8 steps
    m = Measurement(steady[:10] + burst + steady[10:])
    assert m.discarded == list(range(10, 18))
    assert m.robust_median == pytest.approx(0.00101, abs=1e-5)
    assert m.median > m.robust_median, "the plain median is dragged up by the burst"
    assert len(m.times) == 28 and m.times[10:18] == burst


def test_ordinary_jitter_discards_nothing():
    m = Measurement([0.001, 0.0011, 0.00095, 0.00105, 0.0012, 0.001, 0.00098, 0.00102])
    assert m.discarded == [] and m.robust_median == m.median
    assert Measurement([0.002] * 10).discarded == []


def test_measurement_stats_are_derived_from_raw_samples():
    samples = [0.5, 0.1, 0.4, 0.2, 0.3, 0.9, 0.6, 0.7, 0.8, 1.0]
    m = Measurement(samples)
    as_tensor = torch.tensor(samples, dtype=torch.float64)
    assert m.times == samples
    assert m.median == pytest.approx(torch.quantile(as_tensor, 0.5).item())
    q25, q75 = torch.quantile(as_tensor, torch.tensor([0.25, 0.75], dtype=torch.float64))
    assert m.iqr == pytest.approx((q75 - q25).item())
    # Ten samples support no tail (LoadGen's early-stopping counts: 64 for p90, 662 for p99).
    assert m.p90 is None and m.p99 is None
    assert (m.mean, m.min, m.max) == (pytest.approx(0.55), 0.1, 1.0)
    assert m.relative_iqr == pytest.approx(m.iqr / m.median)
    assert m.has_warnings and "IQR" in m.warnings[0]


def test_measurement_of_steady_samples_has_no_warning_and_rejects_empty():
    assert not Measurement([1.0, 1.01, 0.99, 1.0]).has_warnings
    assert Measurement([2.0]).median == 2.0
    with pytest.raises(ValueError):
        Measurement([])


def test_quantile_interpolates_linearly():
    assert quantile([0.0, 10.0], 0.25) == 2.5
    assert quantile([1.0, 2.0, 3.0], 0.5) == 2.0


def test_theil_sen_drift_is_exact_on_a_line_and_ignores_one_outlier():
    line = [1.0 + 0.1 * i for i in range(10)]
    assert theil_sen_drift(line) == pytest.approx(0.9)
    flat_with_spike = [1.0] * 9 + [50.0]
    assert theil_sen_drift(flat_with_spike) == pytest.approx(0.0)


def test_warmup_rule_needs_a_full_stable_untrending_window():
    rule = WarmupRule(window=5, threshold=0.1, max_steps=20)
    assert not rule.is_steady([1.0] * 4)
    assert rule.is_steady([9.0, 3.0, 1.0, 1.01, 0.99, 1.0, 1.0])
    # Falling 3% a step: tight spread, but a 12% drift over the window.
    assert not rule.is_steady([1.0 * 0.97**i for i in range(5)])
    with pytest.raises(BadInput):
        WarmupRule(window=5, max_steps=4)


def test_counter_delta_treats_missing_compile_time_as_zero_and_counts_recompiles():
    before = CompileCounters(2, None, "s", {"recompiles": 1, "graph_breaks": 0, "label": "x"})
    after = CompileCounters(3, 1.5, "s", {"recompiles": 3, "graph_breaks": 0, "label": "x"})
    delta = CounterDelta.between(before, after)
    assert (delta.graphs, delta.compile_seconds) == (1, 1.5)
    assert delta.extra == {"recompiles": 2, "graph_breaks": 0}
    assert delta.recompiles == 2
    unknown = CompileCounters(None, None, "s")
    assert CounterDelta.between(unknown, unknown).graphs is None
    assert CounterDelta.between(unknown, unknown).compile_seconds is None
    idle = CompileCounters(0, None, "s")
    assert CounterDelta.between(idle, idle).compile_seconds == 0.0


# --- phases with a fake clock --------------------------------------------------------------------


def test_warmup_converges_on_a_stable_series(monkeypatch):
    clock = FakeClock([5.0] + [0.001] * 100)
    monkeypatch.setattr(baseline, "perf_counter", clock)
    settings = BaselineSettings(steady_steps=5, warmup=WarmupRule(4, 0.1, 50))
    result = measure(fake_prepared(clock), CpuTarget(), settings, log=quiet)
    warmup = result.phase(PHASE_WARMUP)
    assert warmup.converged is True and warmup.steps == 4
    assert result.phase(PHASE_FIRST_CALL).measurement.times == [5.0]
    assert result.phase(PHASE_STEADY).first_step == 6
    assert result.steady.times == pytest.approx([0.001] * 5)


def test_a_converged_warmup_bar_ends_complete(monkeypatch):
    """JupyterLab paints a bar closed short of its total red ("4/50"): a warm-up that settled
    early is complete, so its bar's total becomes the steps it took."""
    from tqdm.auto import tqdm

    closed: list[tuple[str, int, int]] = []

    class RecordingBar(tqdm):
        def close(self) -> None:
            closed.append((self.desc, self.n, self.total))
            super().close()

    monkeypatch.setattr(baseline, "progress_bar", RecordingBar)
    clock = FakeClock([5.0] + [0.001] * 100)
    monkeypatch.setattr(baseline, "perf_counter", clock)
    settings = BaselineSettings(steady_steps=5, warmup=WarmupRule(4, 0.1, 50))
    measure(fake_prepared(clock), CpuTarget(), settings, log=quiet, progress_bars=True)
    warmup = [(n, total) for desc, n, total in closed if "warm-up" in desc]
    assert set(warmup) == {(4, 4)}  # tqdm may close a bar twice (again when collected)
    assert all(n == total for _, n, total in closed)


def test_warmup_stops_at_the_cap_on_a_trending_series(monkeypatch):
    clock = FakeClock([1.0 * 0.9**i for i in range(100)])
    monkeypatch.setattr(baseline, "perf_counter", clock)
    settings = BaselineSettings(steady_steps=3, warmup=WarmupRule(4, 0.1, 12))
    result = measure(fake_prepared(clock), CpuTarget(), settings, log=quiet)
    warmup = result.phase(PHASE_WARMUP)
    assert warmup.converged is False and warmup.steps == 12
    assert result.warmup_converged is False and result.steady is not None


def test_a_recompile_during_steady_state_is_counted(monkeypatch):
    """Real Dynamo: the input grows by one element at step 8, inside the steady state."""
    clock = FakeClock([0.001] * 100)
    monkeypatch.setattr(baseline, "perf_counter", clock)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: (x * 2).sum(), backend="eager", dynamic=False)
    calls = itertools.count(1)

    def body() -> torch.Tensor:
        return compiled(torch.ones(8 if next(calls) < 8 else 9))

    settings = BaselineSettings(steady_steps=5, warmup=WarmupRule(4, 0.1, 10))
    result = measure(fake_prepared(clock, body), CpuTarget(), settings, log=quiet)
    assert result.phase(PHASE_STEADY).first_step == 6
    assert result.steady_recompiles >= 1
    assert result.phase(PHASE_WARMUP).compile.recompiles == 0
    # The ledger names the recompile's cause, phase and step, from Dynamo's own records.
    steady = result.steady_compiles()
    assert [(e.cause, e.step) for e in steady] == [(CAUSE_NEW_SHAPE, 8)]
    assert "size mismatch" in steady[0].detail and "expected 8, actual 9" in steady[0].detail
    assert result.ledger[0].cause == CAUSE_FIRST and result.ledger[0].phase == PHASE_FIRST_CALL
    assert "new input shape at step 8" in result.steady_recompile_sentence()


def test_the_ledger_names_a_guard_failure_that_is_not_a_shape(monkeypatch):
    """Real Dynamo: a Python flag the graph specialized on changes at step 7 (steady state)."""
    clock = FakeClock([0.001] * 100)
    monkeypatch.setattr(baseline, "perf_counter", clock)
    torch._dynamo.reset()
    config = {"scale": True}

    def body_fn(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).sum() if config["scale"] else x.sum()

    compiled = torch.compile(body_fn, backend="eager")
    calls = itertools.count(1)

    def body() -> torch.Tensor:
        config["scale"] = next(calls) < 7
        return compiled(torch.ones(8))

    settings = BaselineSettings(steady_steps=5, warmup=WarmupRule(4, 0.1, 10))
    result = measure(fake_prepared(clock, body), CpuTarget(), settings, log=quiet)
    (entry,) = result.steady_compiles()
    assert entry.cause == CAUSE_GUARD and entry.step == 7
    assert "scale" in entry.detail, entry.detail


def test_the_ledger_names_a_graph_break_with_its_reason_and_user_line(monkeypatch):
    """Real Dynamo: `.item()` in the middle of the function breaks the graph."""
    clock = FakeClock([0.001] * 100)
    monkeypatch.setattr(baseline, "perf_counter", clock)
    torch._dynamo.reset()

    def breaking(x: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        if y.sum().item() > -100:  # the graph break
            y = y * 2
        return y.cos().sum()

    compiled = torch.compile(breaking, backend="eager")
    settings = BaselineSettings(steady_steps=3, warmup=WarmupRule(4, 0.5, 4))
    result = measure(
        fake_prepared(clock, lambda: compiled(torch.ones(4))), CpuTarget(), settings, log=quiet
    )
    breaks = [e for e in result.ledger if e.cause == CAUSE_GRAPH_BREAK]
    assert len(breaks) == 1 and breaks[0].phase == PHASE_FIRST_CALL
    assert "item()" in breaks[0].detail
    line = breaking.__code__.co_firstlineno + 2
    assert breaks[0].location.startswith(f"{__file__}:{line} in breaking"), breaks[0].location
    assert result.steady_recompiles == 0


# --- whole configurations, real torch ------------------------------------------------------------


def test_loss_that_goes_nan_is_flagged_at_its_step():
    workload = small_workload(lambda: CallCounting(k=4, behaviour="nan"))
    settings = BaselineSettings(steady_steps=4, warmup=QUICK.warmup, modes=(EAGER,))
    result = run_baseline(workload, CpuTarget(), settings, log=quiet)
    train = result.config(TRAIN, EAGER)
    assert train.nonfinite_step == 4
    assert all(math.isfinite(loss) for loss in train.losses[:3])
    assert math.isnan(train.losses[3]) and math.isnan(train.loss_last)
    assert train.phase_of_step(4) == PHASE_WARMUP
    assert result.config(INFER, EAGER).nonfinite_step is None  # eval mode stays finite
    assert result.failures == []
    data = json.loads(json.dumps(_jsonable(result_data(result))))
    assert data["configs"][0]["nonfinite_step"] == 4
    # The verdict and the headline say it, not only a table.
    assert baseline_verdict(result).status == "blocker"
    assert result_data(result)["verdict"].status == "blocker"
    assert "the loss became NaN or Inf at step 4 (warm-up)" in result.headline()
    assert data["headline"] == result.headline()


def test_a_raising_step_is_reported_and_the_other_configurations_run(tmp_path):
    workload = small_workload(lambda: CallCounting(k=3, behaviour="raise"))
    result = run_baseline(workload, CpuTarget(), QUICK, log=quiet)
    train = result.config(TRAIN, EAGER)
    failure = train.failure
    assert (failure.phase, failure.step) == (PHASE_WARMUP, 3)
    assert failure.error.startswith("ValueError: boom at call 3")
    assert "forward" in failure.location and not failure.compile_failure
    assert train.phase(PHASE_WARMUP).steps == 1  # step 2 ran, step 3 raised
    assert result.config(INFER, EAGER).steady is not None
    compiled = result.config(TRAIN, COMPILED).failure
    assert (compiled.phase, compiled.step, compiled.compile_failure) == (PHASE_WARMUP, 3, False)
    assert result.failures == [failure, compiled]
    assert "train/eager failed in warm-up step 3" in result.headline()
    write_json_atomic(tmp_path / "r.json", result_data(result))
    with pytest.raises(WorkbenchError, match="warm-up step 3"):
        raise_on_step_failure(result)
    for failed in result.failures:
        failed.error += "."  # torch's own messages often end in a full stop
    with pytest.raises(WorkbenchError) as raised:
        raise_on_step_failure(result)
    assert ".;" not in str(raised.value) and ".." not in str(raised.value)


class FullGraphCpu(CpuTarget):
    """CPU with fullgraph compile, as the native Neuron backend compiles."""

    def compile(self, fn):
        return torch.compile(fn, backend="eager", fullgraph=True)


class NoCompilerCpu(CpuTarget):
    def compile(self, fn):
        raise RuntimeError("no compiler for this model here")


def test_compile_failure_keeps_eager_results_and_gives_the_reason():
    settings = BaselineSettings(
        steady_steps=3, warmup=QUICK.warmup, kinds=(TRAIN,), modes=(EAGER, COMPILED)
    )
    result = run_baseline(small_workload(DataDependent), FullGraphCpu(), settings, log=quiet)
    compiled = result.config(TRAIN, COMPILED)
    assert compiled.failure.compile_failure and compiled.failure.phase == PHASE_FIRST_CALL
    assert result.config(TRAIN, EAGER).steady is not None
    assert result.failures == [] and result.compile_failures == [compiled.failure]
    assert "compile failed" in result.headline()
    raise_on_step_failure(result)  # a compile failure is a finding, not a failed run
    assert result.checklist.graphs[0].graph_breaks >= 1


def test_a_target_whose_compile_raises_is_a_compile_failure():
    settings = BaselineSettings(steady_steps=3, warmup=QUICK.warmup, kinds=(INFER,))
    result = run_baseline(
        small_workload(lambda: nn.Linear(8, 3)), NoCompilerCpu(), settings, log=quiet
    )
    failure = result.config(INFER, COMPILED).failure
    assert (failure.phase, failure.step, failure.compile_failure) == (PHASE_COMPILE, 0, True)
    assert "no compiler for this model here" in failure.error
    assert result.config(INFER, EAGER).throughput is not None


def test_real_torch_compile_runs_all_four_configurations(tmp_path):
    reference = tmp_path / "ref.pt"
    result = run_baseline(load_workload("seed-mlp"), CpuTarget(), QUICK, log=quiet,
                          reference_path=reference)  # fmt: skip
    assert [(c.kind, c.mode) for c in result.configs] == [
        (TRAIN, EAGER), (TRAIN, COMPILED), (INFER, EAGER), (INFER, COMPILED),
    ]  # fmt: skip
    for config in result.configs:
        assert config.failure is None and config.steady is not None
        assert len(config.steady.times) == 4 and config.throughput > 0
        assert config.steady_recompiles == 0
    compiled = result.config(TRAIN, COMPILED)
    assert compiled.phase(PHASE_FIRST_CALL).compile.graphs >= 1
    assert result.config(TRAIN, EAGER).phase(PHASE_FIRST_CALL).compile.graphs == 0
    assert len(result.paybacks()) == 2
    assert result.checklist.graph_changes_with_shape is False
    assert result.checklist.custom_ops == {}
    assert reference.exists() and result.reference.path == str(reference)
    saved = write_json_atomic(tmp_path / "01_baseline.json", result_data(result))
    data = json.loads(saved.read_text())
    steady = data["configs"][0]["phases"][2]
    assert steady["phase"] == "steady" and len(steady["measurement"]["times"]) == 4
    assert data["headline"] == result.headline()
    assert "NaN" not in result.headline(), "finite losses are not a NaN finding"
    # No step raised and no loss diverged: not a blocker (a loaded machine may make it noisy).
    assert data["verdict"]["status"] in ("pass", "attention"), data["verdict"]
    # The ledger: the compiled first call compiles (forward, then backward), steady state never.
    ledger = [e for e in data["compile_ledger"] if e["kind"] == TRAIN and e["mode"] == COMPILED]
    assert ledger[0]["phase"] == "first_call" and ledger[0]["cause"] == CAUSE_FIRST
    assert ledger[0]["seconds"] > 0 and ledger[0]["step"] == 1
    assert not [e for e in data["compile_ledger"] if e["phase"] == "steady"]


def test_host_peak_memory_is_per_phase_where_the_os_allows():
    host = HostPeakRss()
    if "clear_refs" not in host.source:
        pytest.skip(f"peak reset not available here: {host.source}")
    host.reset()
    block = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
    with_block = host.peak()
    del block
    host.reset()
    assert host.peak() < with_block - 32 * 2**20


# --- checklist ------------------------------------------------------------------------------------


class ShapeDependent(LinearHead):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.lin(x)
        return torch.relu(out) if x.shape[0] > 4 else out


@torch.library.custom_op("wbtest::scale", mutates_args=())
def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2


scale.register_fake(lambda x: torch.empty_like(x))
scale.register_autograd(lambda ctx, grad: grad * 2)


class UsesCustomOp(LinearHead):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scale(self.lin(x))


def test_checklist_sees_shape_dependent_graphs_and_custom_ops():
    shape = collect_checklist(small_workload(ShapeDependent), CpuTarget())
    assert [g.batch_size for g in shape.graphs] == [8, 4]
    assert shape.graph_changes_with_shape is True
    custom = collect_checklist(small_workload(UsesCustomOp), CpuTarget())
    assert custom.custom_ops == {"wbtest": ["wbtest.scale.default"]}
    assert custom.graph_changes_with_shape is False
    assert shape.versions["torch"] == torch.__version__


# --- reference artifact ---------------------------------------------------------------------------


def test_reference_artifact_round_trips(tmp_path):
    workload = load_workload("seed-mlp")
    summary = write_reference(workload, CpuTarget(), tmp_path / "ref.pt")
    loaded = load_reference(summary.path)
    inputs, targets = workload.batch("cpu")
    model = workload.build_model("cpu").eval()
    assert torch.equal(loaded["inputs"][0], inputs[0]) and torch.equal(loaded["targets"], targets)
    with torch.no_grad():
        # Outputs are kept by name (a tensor output is "outputs"), plain tensors only.
        assert list(loaded["outputs"]) == ["outputs"]
        assert torch.equal(loaded["outputs"]["outputs"], model(*inputs))
    assert loaded["state_sha256"] == state_sha256(model) == summary.state_sha256
    assert loaded["loss"] == pytest.approx(summary.loss)
    trained = workload.build_model("cpu")
    with torch.no_grad():
        trained[0].weight.add_(1e-6)
    assert state_sha256(trained) != summary.state_sha256


# --- headline ---------------------------------------------------------------------------------


def test_headline_when_compiled_is_faster():
    eager = timed_config(TRAIN, EAGER, 0.002, [0.001] * 4, [0.001] * 10)
    compiled = timed_config(TRAIN, COMPILED, 10.0005, [0.0005] * 4, [0.0005] * 10)
    payback = compile_payback(eager, compiled)
    assert payback.speedup == pytest.approx(2.0)
    assert payback.compile_cost == pytest.approx(10.0)
    assert payback.break_even_steps == math.ceil(10.0 / 0.0005)
    assert payback.sentence() == (
        "training step: its 10.00 s compile cost (compiler cache unknown) is repaid after "
        "~20,000 steps at the measured 2.00x speed-up (95% interval 2.00-2.00x)"
    )


def test_headline_when_compiled_is_slower():
    eager = timed_config(INFER, EAGER, 0.001, [0.001] * 4, [0.001] * 10)
    compiled = timed_config(INFER, COMPILED, 3.0, [0.002] * 4, [0.002] * 10)
    payback = compile_payback(eager, compiled)
    assert payback.break_even_steps is None
    assert payback.sentence().startswith(
        "inference call: compiled is slower (0.50x eager's speed, 95% interval 0.50-0.50x), so "
        "its 3.00 s compile cost (compiler cache unknown) is never repaid"
    )
    assert isinstance(payback, CompilePayback)


def test_headline_reads_both_kinds_and_warns_when_timings_are_noisy():
    configs = [
        timed_config(TRAIN, EAGER, 0.002, [0.001] * 4, [0.001] * 10),
        timed_config(TRAIN, COMPILED, 10.0005, [0.0005] * 4, [0.0005] * 10),
        timed_config(INFER, EAGER, 0.001, [0.001] * 4, [0.001, 0.002] * 5),
    ]
    result = baseline_result(configs, workload={"name": "w"})
    assert result.headline() == (
        "On cpu, training step: its 10.00 s compile cost (compiler cache unknown) is repaid "
        "after ~20,000 steps at the measured 2.00x speed-up (95% interval 2.00-2.00x); "
        "inference call: eager median "
        "1.5 ms (5,333 samples/s); "
        "the timings are noisy (steady-state IQR up to 67% of the median), so compare them "
        "with care."
    )


def test_compile_cost_is_the_compiled_first_call_above_its_own_steady_pace():
    """A slow, noisy eager warm-up (a 30 s first call) must not move the compile cost."""
    compiled = timed_config(TRAIN, COMPILED, 32.0, [0.5] * 4, [0.5, 0.51, 0.49] * 4)
    calm = timed_config(TRAIN, EAGER, 1.0, [1.0] * 4, [1.0, 1.01, 0.99] * 4)
    noisy = timed_config(TRAIN, EAGER, 30.0, [9.0, 3.0, 1.0, 1.0], [1.0, 1.01, 0.99] * 4)
    assert compile_payback(calm, compiled).compile_cost == pytest.approx(31.5)
    assert compile_payback(noisy, compiled).compile_cost == pytest.approx(31.5)
    assert (
        compile_payback(noisy, compiled)
        .sentence()
        .startswith("training step: its 31.50 s compile cost (compiler cache unknown) is repaid")
    )


def test_no_payback_when_the_speed_up_interval_includes_one():
    """Overlapping raw samples: the point estimate says faster, the interval says unknown."""
    eager = timed_config(TRAIN, EAGER, 0.01, [0.01] * 4, [0.010, 0.013, 0.008, 0.012, 0.009] * 4)
    compiled = timed_config(
        TRAIN, COMPILED, 5.0, [0.01] * 4, [0.008, 0.012, 0.0095, 0.011, 0.009] * 4
    )
    payback = compile_payback(eager, compiled)
    assert payback.speedup > 1 and payback.speedup_low < 1 < payback.speedup_high
    assert payback.break_even_steps is None and not payback.distinguishable
    assert "cannot be told apart" in payback.sentence() and "repaid" not in payback.sentence()
    # The same medians with tight samples: the interval leaves out 1, so a payback is given.
    tight = timed_config(TRAIN, COMPILED, 5.0, [0.01] * 4, [0.0095] * 20)
    steady_eager = timed_config(TRAIN, EAGER, 0.01, [0.01] * 4, [0.0105] * 20)
    assert "repaid after" in compile_payback(steady_eager, tight).sentence()


def test_a_loss_that_fails_on_inference_outputs_is_recorded_and_the_rest_runs(tmp_path):
    """An HF-style model returns a mapping: the training loss works on it by design, the same
    loss on inference outputs raises. 01 keeps every configuration and writes its file."""

    class DictOutput(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 3)

        def forward(self, x: torch.Tensor):
            out = self.lin(x)
            return out if self.training else {"logits": out}

    settings = BaselineSettings(steady_steps=3, warmup=QUICK.warmup, modes=(EAGER,))
    result = run_baseline(small_workload(DictOutput), CpuTarget(), settings, log=quiet)
    train, infer = result.config(TRAIN, EAGER), result.config(INFER, EAGER)
    assert train.failure is None and train.steady is not None
    assert infer.failure.phase == "loss" and infer.failure.step == 1
    assert infer.phase(PHASE_STEADY).steps == 3  # the calls themselves ran and were timed
    assert result.failures == [infer.failure]
    assert "infer/eager failed in loss on the outputs step 1" in result.headline()
    data = json.loads(write_json_atomic(tmp_path / "01.json", result_data(result)).read_text())
    assert [c["status"] for c in data["configs"]] == ["ok", "step failed"]


def test_a_loss_that_is_no_scalar_fails_each_configuration_in_its_own_phase():
    workload = small_workload(lambda: nn.Linear(8, 3))
    workload.loss_fn = lambda out, target: nn.functional.cross_entropy(
        out, target, reduction="none"
    )
    settings = BaselineSettings(steady_steps=3, warmup=QUICK.warmup, modes=(EAGER,))
    result = run_baseline(workload, CpuTarget(), settings, log=quiet)
    failure = result.config(TRAIN, EAGER).failure
    assert failure.phase == PHASE_FIRST_CALL and "scalar outputs" in failure.error
    assert result.config(INFER, EAGER).failure.phase == "loss"


class LosesDeviceAtWarmup(CpuTarget):
    """A device whose memory-window reset raises once, at the first configuration's warm-up:
    a failure around the steps rather than in one."""

    def __init__(self) -> None:
        super().__init__()
        self.resets = 0

    def reset_peak_memory(self) -> None:
        self.resets += 1
        if self.resets == 2:
            raise RuntimeError("device lost")


def test_a_failure_around_the_steps_is_recorded_with_its_phase_and_the_rest_runs():
    settings = BaselineSettings(steady_steps=3, warmup=QUICK.warmup, modes=(EAGER,))
    result = run_baseline(
        small_workload(lambda: nn.Linear(8, 3)), LosesDeviceAtWarmup(), settings, log=quiet
    )
    train, infer = result.configs
    assert (train.failure.phase, train.failure.step) == (PHASE_WARMUP, 2)
    assert train.failure.error == "RuntimeError: device lost"
    assert train.phase(PHASE_FIRST_CALL).steps == 1
    assert infer.failure is None and infer.steady is not None
    assert result.failures == [train.failure]


class ReadsItem(LinearHead):
    """A host read in the forward: Dynamo breaks the graph there and logs a warning about it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.lin(x)
        return out * (out.detach().abs().max().item() + 1)


class EagerBackendCpu(CpuTarget):
    def compile(self, fn):
        return torch.compile(fn, backend="eager")


def test_dynamo_warnings_in_a_compiled_run_are_kept_grouped_not_printed(capfd, item_warning_again):
    settings = BaselineSettings(steady_steps=3, warmup=QUICK.warmup, kinds=(INFER,))
    result = run_baseline(small_workload(ReadsItem), EagerBackendCpu(), settings, log=quiet)
    assert "Graph break" not in capfd.readouterr().err
    compiled = result.config(INFER, COMPILED)
    item = [g for g in compiled.torch_messages if "Tensor.item()" in g.message]
    assert item and item[0].source.startswith("torch._dynamo")
    assert not result.config(INFER, EAGER).torch_messages  # eager never traces
    data = result_data(result)
    assert data["configs"][1]["torch_messages"][0]["message"] == item[0].message


def test_settings_reject_nonsense():
    with pytest.raises(BadInput):
        BaselineSettings(steady_steps=1)
    with pytest.raises(BadInput):
        BaselineSettings(modes=("jit",))


# --- compiler host memory ---------------------------------------------------------------------


def test_child_peak_rss_sees_a_compiler_sized_child_process():
    """A real child process that holds 200 MiB for a second, as a compiler worker would."""
    import subprocess
    import sys

    holder = (
        "b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096]); import time; time.sleep(1)"
    )
    with ChildPeakRss(interval=0.02) as workers:
        subprocess.run([sys.executable, "-c", holder], check=True)
    assert workers.samples >= 3
    assert workers.peak >= 200 * 2**20
    assert "python" in workers.largest[0] and workers.largest[1] >= 200 * 2**20


class FakeNeuronCompilerTarget(CpuTarget):
    """CPU for the steps, with the Neuron targets' reading of compiler failures."""

    compiler_host_oom = NeuronTarget.compiler_host_oom


# The compiler's own text for host-RAM exhaustion, as Neuron users report it (neuron.md section 6,
# item 7: -9 and "[F137] ... insufficient system memory").
F137 = (
    "RuntimeError: neuronx-cc failed: [F137] neuronx-cc terminated abnormally - "
    "insufficient system memory"
)


@pytest.mark.parametrize(
    "text",
    [F137, "subprocess.CalledProcessError: Command '['neuronx-cc', 'compile']' died with -9."],
)
def test_a_compile_killed_for_host_ram_is_named_with_its_remedy(text):
    """Fake that follows the documented contract: the compile raises the compiler's F137 text
    (or its -9 exit) on the first call; torch-neuronx and neuronx-cc cannot run here."""

    def step() -> torch.Tensor:
        raise RuntimeError(text)

    prepared = PreparedStep(
        TRAIN, COMPILED, step, 8, 8, torch.zeros(8), nn.functional.cross_entropy
    )
    result = measure(prepared, FakeNeuronCompilerTarget(), QUICK, log=quiet)
    diagnosis = result.failure.diagnosis
    assert diagnosis.startswith("neuronx-cc ran out of host memory")
    assert "fewer parallel compile jobs" in diagnosis and "more host RAM" in diagnosis
    assert diagnosis in result.failure.summary()


def test_an_ordinary_step_failure_gets_no_host_ram_diagnosis():
    def step() -> torch.Tensor:
        raise RuntimeError("shape mismatch in aten::mm")

    prepared = PreparedStep(
        TRAIN, COMPILED, step, 8, 8, torch.zeros(8), nn.functional.cross_entropy
    )
    result = measure(prepared, FakeNeuronCompilerTarget(), QUICK, log=quiet)
    assert result.failure.diagnosis == "" and "shape mismatch" in result.failure.summary()


@pytest.mark.parametrize(
    ("hits", "misses", "state"),
    [(0, 3, "cold"), (3, 0, "warm"), (1, 2, "partly warm"), (0, 0, "unknown")],
)
def test_compile_cost_says_whether_the_compiler_cache_was_cold_or_warm(hits, misses, state):
    compiled = timed_config(TRAIN, COMPILED, 2.5, [0.5] * 4, [0.5] * 10)
    compiled.phases[0].compile = CounterDelta(
        1, 2.0, {"compiler_cache_hits": hits, "compiler_cache_misses": misses}
    )
    eager = timed_config(TRAIN, EAGER, 1.0, [1.0] * 4, [1.0] * 10)
    payback = compile_payback(eager, compiled)
    assert payback.compiler_cache == state
    assert f"2.00 s compile cost (compiler cache {state})" in payback.sentence()


def test_compiler_cache_counters_move_with_a_real_compile(tmp_path, monkeypatch):
    """Inductor's FX graph cache: a fresh cache folder misses, the same graph again hits."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    import torch._dynamo

    target = CpuTarget()
    before = target.compile_counters()
    torch.compile(lambda x: (x * 3).cos())(torch.randn(8))
    after_first = target.compile_counters()
    first = CounterDelta.between(before, after_first)
    torch._dynamo.reset()
    torch.compile(lambda x: (x * 3).cos())(torch.randn(8))
    second = CounterDelta.between(after_first, target.compile_counters())
    assert cache_state(first) == "cold"
    assert cache_state(second) == "warm"


def test_a_password_in_the_workloads_path_never_reaches_the_reference_artifact(tmp_path):
    """A checkpoint folder named with user:password@ is scrubbed from the reports and, now,
    from 01_baseline_reference.pt too."""
    import dataclasses

    secret = "hunter2pw99"
    workload = dataclasses.replace(
        load_workload("seed-mlp"), spec=f"hf:/mnt/https://bob:{secret}@host/ckpt"
    )
    summary = write_reference(workload, CpuTarget(), tmp_path / "ref.pt")
    assert secret.encode() not in (tmp_path / "ref.pt").read_bytes()
    assert "host/ckpt" in load_reference(summary.path)["workload"]
