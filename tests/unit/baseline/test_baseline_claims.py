"""What notebook 01 may claim from its timings: a speed-up interval of the estimate's own
statistic that contains it, no speed-up or payback from a loaded machine, a tail only where the
sample count supports a percentile, and one median in the log and the tables.

Records are built by hand (HostLoad values included), so every rule is checked on both sides
without depending on how busy this machine happens to be.
"""

from __future__ import annotations

import random
import re

import pytest
import torch
from torch import nn

import workbench.baseline.measure as baseline
import workbench.baseline.views as views
from tests.fixtures.baseline_records import baseline_result, timed_config
from workbench.baseline.checklist import Checklist
from workbench.baseline.measure import PreparedStep, _phase_line, measure
from workbench.baseline.records import (
    COMPILED,
    EAGER,
    INFER,
    PHASE_FIRST_CALL,
    PHASE_STEADY,
    PHASE_WARMUP,
    TRAIN,
    BaselineResult,
    BaselineSettings,
    CompilePayback,
    ConfigResult,
    CounterDelta,
    MemoryUse,
    PhaseResult,
    baseline_verdict,
    compile_payback,
    result_data,
)
from workbench.runner import LINE_LIMIT
from workbench.targets.cpu import CpuTarget
from workbench.timing import (
    HostLoad,
    Measurement,
    WarmupRule,
    format_seconds,
    quantile,
    ratio_of_medians_interval,
)

QUIET = HostLoad(2, 2, 1.0, other_share=0.03, steal_share=0.0, load_average=0.2, loaded=False)
LOADED = HostLoad(2, 2, 1.0, other_share=0.60, steal_share=0.0, load_average=3.1, loaded=True)


def config(
    mode: str, first: float, steady: list[float], host: HostLoad | None = QUIET, kind: str = TRAIN
) -> ConfigResult:
    """A training configuration whose warm-up and steady state were timed under `host`."""
    return timed_config(kind, mode, first, steady[:4], steady, host=host)


def result_of(*configs: ConfigResult) -> BaselineResult:
    return baseline_result(
        list(configs),
        settings=BaselineSettings(kinds=(TRAIN,)),
        checklist=Checklist({}, [], {"dtype": "int64", "shape": [8]}),
    )


def displayed(monkeypatch: pytest.MonkeyPatch, show, result: BaselineResult) -> str:
    """The HTML a view displays."""
    shown: list[str] = []
    monkeypatch.setattr(views, "display", lambda item, **_: shown.append(item.html_text))
    show(result)
    return "\n".join(shown)


# --- the interval is of the estimate's own statistic -------------------------------------------

# 18 evenly spread fast steps and a burst of 12 slow ones: the outlier rule leaves the burst out
# of the robust median, while the plain median sits at the top of the fast steps.
FAST = [0.490 + i * 0.02 / 17 for i in range(18)]
BURST = [2.0] * 12


def test_the_speed_up_interval_contains_its_robust_median_estimate():
    eager = config(EAGER, 0.002, [1.0] * 30)
    compiled = config(COMPILED, 5.0, FAST + BURST)
    payback = compile_payback(eager, compiled)
    assert payback.speedup == pytest.approx(2.0)
    assert payback.speedup_low <= payback.speedup <= payback.speedup_high
    assert payback.interval_holds
    # The wide interval includes 1: an honest "cannot be told apart", with the interval shown.
    assert "cannot be told apart" in payback.sentence()
    assert payback.interval_words in payback.sentence()


def _plain_median_interval(numerator: list[float], denominator: list[float]) -> tuple[float, float]:
    """The interval as it was: a bootstrap of the plain medians' ratio."""
    draw = random.Random(0)
    ratios = sorted(
        quantile(sorted(draw.choices(numerator, k=len(numerator))), 0.5)
        / quantile(sorted(draw.choices(denominator, k=len(denominator))), 0.5)
        for _ in range(2000)
    )
    return quantile(ratios, 0.025), quantile(ratios, 0.975)


def test_an_interval_of_the_plain_median_leaves_the_robust_estimate_out():
    """The reported defect: the plain-median bootstrap brackets a different statistic."""
    low, high = _plain_median_interval([1.0] * 30, FAST + BURST)
    estimate = 1.0 / Measurement(FAST + BURST).robust_median
    assert not low <= estimate <= high
    robust_low, robust_high = ratio_of_medians_interval(tuple([1.0] * 30), tuple(FAST + BURST))
    assert robust_low <= estimate <= robust_high


def test_a_degenerate_interval_is_never_printed_nor_a_payback_claimed():
    broken = CompilePayback(TRAIN, 0.001, 0.0013, 0.76, 0.0, 0.75, 2.0, None)
    assert not broken.interval_holds and not broken.claimed and not broken.distinguishable
    text = broken.sentence()
    assert "0.76" not in text and "0.00" not in text and "0.75" not in text
    assert "no usable interval" in text and "repaid" not in text
    sound = CompilePayback(TRAIN, 0.001, 0.0013, 0.76, 0.70, 0.80, 2.0, None)
    assert sound.interval_holds and "0.76x eager's speed, 95% interval 0.70-0.80x" in (
        sound.sentence()
    )


# --- a loaded machine claims no speed-up --------------------------------------------------------


def quiet_pair() -> tuple[ConfigResult, ConfigResult]:
    return config(EAGER, 0.002, [0.001] * 30), config(COMPILED, 10.0005, [0.0005] * 30)


def test_a_quiet_pair_claims_its_speed_up_interval_and_payback(monkeypatch):
    result = result_of(*quiet_pair())
    (payback,) = result.paybacks()
    assert payback.claimed and payback.break_even_steps == 20_000
    assert "repaid after ~20,000 steps at the measured 2.00x speed-up" in result.headline()
    assert "95% interval 2.00-2.00x" in result.headline()
    assert baseline_verdict(result).status == "pass"
    html = displayed(monkeypatch, views.comparison, result)
    assert "2.00x" in html and "20,000 steps" in html and "not claimed" not in html


@pytest.mark.parametrize("loaded_mode", [EAGER, COMPILED])
def test_a_loaded_pair_claims_no_speed_up_interval_or_payback(monkeypatch, loaded_mode):
    eager, compiled = quiet_pair()
    loaded = eager if loaded_mode == EAGER else compiled
    for phase in loaded.phases[1:]:
        assert phase.measurement is not None
        phase.measurement.host = LOADED
    result = result_of(eager, compiled)
    (payback,) = result.paybacks()
    assert not payback.claimed and payback.break_even_steps is None
    headline = result.headline()
    assert "timed on a loaded machine" in headline
    assert f"train/{loaded_mode} steady state: other processes 60% of the CPU" in headline
    for claim in ("2.00x", "interval", "repaid", "steps at"):
        assert claim not in headline, claim
    verdict = baseline_verdict(result)
    assert verdict.status == "attention" and "loaded machine" in verdict.reason
    assert any(
        f"({loaded_mode})" in f.reason and "loaded machine" in f.reason for f in verdict.findings
    )
    html = displayed(monkeypatch, views.comparison, result)
    assert "not claimed (loaded machine)" in html and "2.00x" not in html
    checklist = displayed(monkeypatch, views.checklist, result)
    assert "not claimed (loaded machine)" in checklist and "2.00x" not in checklist
    data = result_data(result)
    assert data["comparison"][0]["break_even_steps"] is None
    assert data["comparison"][0]["sentence"] == payback.sentence()


def test_a_fully_loaded_noisy_run_keeps_its_headline_whole_in_the_run_summary():
    noisy = [0.001, 0.004] * 15
    configs = [
        config(mode, first, noisy, LOADED, kind)
        for kind in (TRAIN, INFER)
        for mode, first in ((EAGER, 0.002), (COMPILED, 20.0))
    ]
    result = result_of(*configs)
    result.settings = BaselineSettings()
    headline = result.headline()
    assert headline.count("timed on a loaded machine") == 2 and "noisy" in headline
    assert len(headline) <= LINE_LIMIT, len(headline)


def test_the_load_and_thread_count_are_in_the_record_and_the_report(monkeypatch):
    eager, compiled = quiet_pair()
    data = result_data(result_of(eager, compiled))
    steady = data["configs"][0]["phases"][2]["measurement"]
    assert steady["host"]["threads"] == 2 and steady["host"]["loaded"] is False
    assert data["configs"][0]["phases"][0]["measurement"]["host"] is None
    html = displayed(monkeypatch, views.headline, result_of(eager, compiled))
    assert "quiet: 2 thread(s) on 2 core(s), other processes 3% of the CPU, steal 0%" in html


def test_every_measured_phase_carries_the_machines_load(monkeypatch):
    """A real HostLoadProbe around the timed phases (fake clock for the step times)."""
    now = [0.0]

    def clock() -> float:
        return now[0]

    def step() -> torch.Tensor:
        now[0] += 0.001
        return torch.tensor(1.0)

    monkeypatch.setattr(baseline, "perf_counter", clock)
    prepared = PreparedStep(TRAIN, EAGER, step, 8, 8, torch.zeros(8), nn.functional.cross_entropy)
    settings = BaselineSettings(steady_steps=5, warmup=WarmupRule(4, 0.1, 8))
    lines: list[str] = []
    result = measure(prepared, CpuTarget(), settings, log=lines.append)
    hosts = {p.phase: p.measurement.host for p in result.phases if p.measurement}
    for name in (PHASE_FIRST_CALL, PHASE_WARMUP, PHASE_STEADY):
        host = hosts[name]
        assert host is not None and host.threads == torch.get_num_threads()
    steady_line = next(line for line in lines if "steady state" in line)
    assert f"{torch.get_num_threads()} thread(s)" in steady_line


# --- percentiles only where the samples support them --------------------------------------------


def steady_phase(times: list[float], host: HostLoad | None = QUIET) -> PhaseResult:
    memory = MemoryUse(None, None, None)
    return PhaseResult(PHASE_STEADY, 2, Measurement(times, host=host), memory, CounterDelta(0, 0.0))


@pytest.mark.parametrize(("count", "label"), [(30, "max of 30"), (661, "max of 661"), (662, "p99")])
def test_the_tail_is_a_p99_only_from_loadgens_662_samples(count, label):
    times = [0.001 * (1 + i / count) for i in range(count)]
    phase = steady_phase(times)
    measured = phase.measurement
    assert measured is not None
    expected = f"{label}: {format_seconds(measured.tail(0.99)[1])}"
    row = views._timing_row(ConfigResult(TRAIN, EAGER, 8, 8, [phase]), "samples/s")
    assert row["tail"] == expected
    assert f"{label} {format_seconds(measured.tail(0.99)[1])}" in _phase_line(phase)
    if count < 662:
        assert "p99" not in row["tail"] and "p99" not in _phase_line(phase)


def test_no_table_of_the_report_claims_a_p99_from_30_samples(monkeypatch):
    html = displayed(monkeypatch, views.headline, result_of(*quiet_pair()))
    assert "max of 30" in html and not re.search(r"<t[dh]>p99", html)


# --- one median everywhere ------------------------------------------------------------------------


def test_the_log_and_the_tables_give_the_same_robust_median(monkeypatch):
    times = FAST + BURST
    measured = Measurement(times)
    robust, plain = format_seconds(measured.robust_median), format_seconds(measured.median)
    assert robust != plain, "the burst must move the plain median for this test to mean anything"
    phase = steady_phase(times)
    config_ = ConfigResult(TRAIN, EAGER, 8, 8, [phase])
    assert f"median {robust}," in _phase_line(phase) and plain not in _phase_line(phase)
    assert views._timing_row(config_, "samples/s")["steady median"] == robust
    assert views._phase_time_row(config_, phase)["median"] == robust


# --- every table fits the page --------------------------------------------------------------------

MOST_COLUMNS = 10  # what the report's 1,100-pixel column shows without a scroll bar


@pytest.mark.parametrize("show", [views.headline, views.phase_table, views.comparison])
def test_every_table_of_01_is_narrow_enough_to_show_whole(monkeypatch, show):
    html = displayed(monkeypatch, show, result_of(*quiet_pair()))
    headers = [row.count("<th>") for row in re.findall(r"<thead>.*?</thead>", html)]
    assert headers and max(headers) <= MOST_COLUMNS, headers
