"""Notebook 05's rules, each with a case that must pass and one that must fail: the stability
windows (on the SLO's percentile, long enough to see periodic interference), what a request is
(input copy, model, output read-back), the percentile-support rule, the SLO's pick on a paced
model whose latency grows with the batch, one cause named everywhere, open-loop queueing, a
planted host gap, and the verdict."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pytest

from tests.fixtures.serving_workloads import glued_workload, paced_workload
from workbench.errors import BadInput
from workbench.serving import views
from workbench.serving.calls import build_serving_model, prepare_call
from workbench.serving.gaps import BEFORE, gap_series
from workbench.serving.load import closed_loop, open_loop
from workbench.serving.records import (
    COMPILED_WHILE_TIMED,
    EAGER,
    JITTER,
    STORED_SAMPLES,
    BatchPoint,
    LoadPoint,
    RequestTime,
    ServingResult,
    ServingSettings,
    Window,
    benchmark_report,
    result_data,
    serving_verdict,
    window_percentile,
)
from workbench.serving.slo import highest_held_rate, slo_answer
from workbench.serving.sweep import sweep
from workbench.serving.windows import measure_windows, windows_agree
from workbench.targets import get_target
from workbench.targets.cpu import CpuTarget
from workbench.timing import HostPeakRss, Measurement

CPU = get_target("cpu")


def window(throughput: float, tail: float, median: float = 0.001) -> Window:
    return Window(10, 10 / throughput, throughput, median, tail)


def test_windows_agree_on_the_slo_percentile_within_the_tolerance_and_not_beyond() -> None:
    steady = [window(100, 0.01), window(104, 0.0102), window(98, 0.0099)]
    assert windows_agree(steady, 0.10)
    drifting_tail = [window(100, 0.01), window(100, 0.0125), window(100, 0.01)]
    assert not windows_agree(drifting_tail, 0.10)
    # Must fail: medians that agree do not make tails that agree (perf_analyzer's --percentile).
    same_median = [window(100, 0.01, 0.001), window(100, 0.03, 0.001), window(100, 0.01, 0.001)]
    assert not windows_agree(same_median, 0.10)
    drifting_throughput = [window(100, 0.01), window(120, 0.01), window(100, 0.01)]
    assert not windows_agree(drifting_throughput, 0.10)
    assert not windows_agree(steady[:2], 0.10)  # two windows cannot show three agreeing


def test_a_window_percentile_is_perf_analyzers_nearest_rank() -> None:
    times = [float(i) for i in range(1, 101)]  # 1 .. 100
    assert window_percentile(times, 0.99) == 99.0  # index round(0.99 * 99) = 98
    assert window_percentile(times, 0.50) == 51.0  # index round(49.5) = 50
    assert window_percentile([3.0, 1.0, 2.0], 0.99) == 3.0


def _request(seconds: float) -> RequestTime:
    return RequestTime(0.0, seconds, 0.0)


@pytest.mark.serial  # times sleeps: a busy machine stretches them
def test_measure_windows_stops_when_stable_and_marks_a_drifting_call_unstable() -> None:
    def constant() -> RequestTime:
        time.sleep(0.0005)
        return _request(0.0005)

    stable = measure_windows(
        constant, requests=20, tolerance=0.10, budget_s=2.0, quantile=0.99, min_window_s=0.0
    )
    assert stable.stable and len(stable.windows) >= 3
    assert len(stable.latency_samples()) == 3 * 20

    calls = iter(range(10**6))

    def drifting() -> RequestTime:
        time.sleep(0.0002)
        return _request(0.001 * (1.3 ** (next(calls) // 20)))  # each window 30% slower

    unstable = measure_windows(
        drifting, requests=20, tolerance=0.10, budget_s=0.4, quantile=0.99, min_window_s=0.0
    )
    assert not unstable.stable and unstable.windows


def test_windows_long_enough_see_periodic_interference_short_ones_never_agree() -> None:
    """A planted stall on every 50th request (a collection, a timer): windows of 20 requests
    alternate between holding one and not, so their p99s never agree and the point is never
    stable, however steady the machine; windows long enough to hold several stalls agree on a
    p99 that includes them. (Throughput, the rule's other half, is wall time: not asserted.)"""

    def periodic() -> Callable[[], RequestTime]:
        calls = iter(range(10**6))

        def call() -> RequestTime:
            time.sleep(0.0001)
            return _request(0.02 if next(calls) % 50 == 0 else 0.001)

        return call

    short = measure_windows(
        periodic(), requests=20, tolerance=0.10, budget_s=0.3, quantile=0.99, min_window_s=0.0
    )
    assert not short.stable and len(short.windows) >= 3
    assert {w.tail for w in short.windows} == {0.02, 0.001}
    long = measure_windows(
        periodic(), requests=150, tolerance=0.10, budget_s=1.0, quantile=0.99, min_window_s=0.02
    )
    assert len(long.windows) >= 3 and all(w.tail == 0.02 for w in long.windows)
    assert all(w.seconds >= 0.02 and w.calls >= 150 for w in long.windows)


class _SlowCopyTarget(CpuTarget):
    """The CPU target with a planted host-to-device copy cost, following Target.to_device's
    contract (the copy finished when it returns), as a device target's input transfer is."""

    copy_s = 0.003

    def to_device(self, tree):  # type: ignore[no-untyped-def]
        time.sleep(self.copy_s)
        return super().to_device(tree)


@pytest.mark.serial  # times sleeps: a busy machine stretches them
def test_a_request_is_timed_with_its_input_copy_and_output_read_back() -> None:
    paced = paced_workload(0.002)
    settings = ServingSettings(batch_sizes=(1,), modes=(EAGER,), window_requests=5,
                               window_seconds=0.05, window_budget_s=0.4)  # fmt: skip
    (cpu,), _ = sweep(paced, CPU, settings, HostPeakRss(), log=lambda _: None)
    assert cpu.input_copy and cpu.infer and cpu.output_copy and cpu.latency
    # On the CPU the copies go through the same code and are near nothing beside the model.
    assert cpu.input_copy.median < cpu.infer.median / 10
    assert cpu.output_copy.median < cpu.infer.median / 10
    # Must fail to be hidden: a planted copy cost is in every request's latency, and apart.
    slow = _SlowCopyTarget()
    (copied,), _ = sweep(paced, slow, settings, HostPeakRss(), log=lambda _: None)
    assert copied.input_copy and copied.latency and copied.infer
    assert copied.input_copy.median >= slow.copy_s
    assert copied.latency.min >= slow.copy_s + copied.infer.min


def test_a_percentile_is_claimed_only_from_enough_samples() -> None:
    few = BatchPoint(EAGER, 1, "ok", latency=Measurement([0.001] * 99 + [0.005]))
    assert few.tail(0.99) == ("max of 100", 0.005, False)
    label, value, supported = few.tail(0.90) or ("", 0.0, False)
    # LoadGen at 100 samples allows 4 over a p90, so its estimate is the 4th largest.
    assert label == "p90" and supported and value == pytest.approx(0.001)
    under = BatchPoint(EAGER, 1, "ok", latency=Measurement([0.001] * 655 + [0.005] * 5))
    assert under.tail(0.99) == ("max of 660", 0.005, False)
    many = BatchPoint(EAGER, 1, "ok", latency=Measurement([0.001] * 657 + [0.005] * 5))
    assert many.tail(0.99) == ("p99", 0.005, True)  # 662: LoadGen's estimate is the maximum
    report = benchmark_report(few)
    assert report["supported"] == ["p50", "p90", "p100"] and report["n_samples"] == 100
    assert report["latency_ms_p100"] == pytest.approx(5.0)


def _paced_points(per_sample_s: float, batches: tuple[int, ...]) -> list[BatchPoint]:
    settings = ServingSettings(
        batch_sizes=batches, modes=(EAGER,), window_requests=5, window_budget_s=0.6
    )
    points, _ = sweep(
        paced_workload(per_sample_s), CPU, settings, HostPeakRss(), log=lambda _: None
    )
    return points


@pytest.mark.serial  # times sleeps: a busy machine stretches them
def test_the_slo_picks_the_largest_batch_that_meets_it_on_a_paced_model() -> None:
    """4 ms per sample: batch 2 takes ~8 ms and batch 4 ~16 ms, so a 12 ms SLO picks 2 (the
    margins leave room for a sleep's overshoot). Judged at p50, which a few samples support:
    a p99 from so few is their maximum, which one preempted sleep on a busy machine moves."""
    points = _paced_points(0.004, (1, 2, 4))
    assert all(p.status == "ok" for p in points)
    answer = slo_answer(points, 12.0, 0.50, EAGER, None, None)
    assert answer.chosen == 2, answer
    assert answer.tail_label == "p50"
    assert answer.throughput == pytest.approx(2 / 0.008, rel=0.35)
    # Must fail: a 2 ms SLO is below every batch's compute.
    none = slo_answer(points, 2.0, 0.50, EAGER, None, None)
    assert none.chosen is None and none.closest == 1
    assert "median alone" in none.limit and "compute" in none.limit
    assert "none meets it" in none.sentence("requests/s")


def test_the_slo_names_the_tail_when_the_median_meets_it() -> None:
    jittery = BatchPoint(EAGER, 2, "ok", latency=Measurement([0.001] * 40 + [0.02] * 3))
    answer = slo_answer([jittery], 5.0, 0.99, EAGER, None, None)
    assert answer.chosen is None and "the tail limits it" in answer.limit
    assert JITTER in answer.limit


def test_graphs_compiled_while_timed_are_the_one_cause_in_headline_table_and_verdict() -> None:
    """A model Dynamo recompiles on every call: each timed request compiles, so compiles, not
    jitter or the compute, set its latency, and every place that names a cause names that."""
    rng = random.Random(0)
    times = [0.001] * 40 + [0.05 + rng.random() * 0.01 for _ in range(20)]
    recompiling = BatchPoint(EAGER, 1, "ok", window_compiles=20, stable=True,
                             windows=[Window(20, 0.1, 200, 0.001, 0.05)] * 3,
                             latency=Measurement(times))  # fmt: skip
    result = _result([recompiling], slo_ms=5.0)
    verdict = serving_verdict(result)
    row = views._point_row(recompiling, "requests/s", 0.99)
    for text in (result.headline(), verdict.reason, row["what sets the tail"]):
        assert COMPILED_WHILE_TIMED in text and JITTER not in text, text
    assert "compute of one call" not in result.headline()
    # Must fail to blame compiles where none happened: the same latencies, nothing compiled.
    quiet = BatchPoint(EAGER, 1, "ok", stable=True, latency=Measurement(times),
                       windows=[Window(20, 0.1, 200, 0.001, 0.05)] * 3)  # fmt: skip
    calm = _result([quiet], slo_ms=5.0)
    assert COMPILED_WHILE_TIMED not in calm.headline() and JITTER in calm.headline()
    assert views._point_row(quiet, "requests/s", 0.99)["what sets the tail"] == JITTER


def _sleeping(seconds: float):
    def call() -> None:
        time.sleep(seconds)

    return call


@pytest.mark.serial  # times sleeps: a busy machine stretches them
def test_open_loop_keeps_queueing_apart_and_it_grows_near_capacity() -> None:
    light = open_loop(_sleeping(0.002), 50, 25, 5.0, 0.05, 0.99)
    assert light.requests == 25 and light.queue is not None and light.compute is not None
    assert light.queue.median < 0.001 < light.compute.median
    # Must fail to stay light: twice the capacity of a 2 ms server queues up.
    heavy = open_loop(_sleeping(0.002), 1000, 40, 5.0, 0.005, 0.99)
    assert heavy.queue is not None and heavy.queue.median > 0.01
    assert heavy.slo_held is False and light.slo_held is True


def test_the_highest_rate_is_the_last_before_the_slo_first_fails() -> None:
    def level(rate: float, held: bool) -> LoadPoint:
        return LoadPoint("open", None, rate, 10, 1.0, None, None, None, held)

    assert highest_held_rate([level(300, True), level(100, True), level(200, True)]) == 300
    assert highest_held_rate([level(100, True), level(200, False), level(300, True)]) == 100
    assert highest_held_rate([level(100, False), level(200, True)]) is None


@pytest.mark.serial  # times sleeps: a busy machine stretches them
def test_closed_loop_streams_queue_behind_one_instance() -> None:
    one = closed_loop(_sleeping(0.002), 1, 20, 5.0, None, 0.99)
    four = closed_loop(_sleeping(0.002), 4, 40, 5.0, None, 0.99)
    assert one.queue is not None and four.queue is not None
    assert one.queue.median < 0.001
    assert four.queue.median > 0.004  # three requests ahead of each one, 2 ms each


@pytest.mark.serial  # times sleeps: a busy machine stretches them
def test_a_planted_host_gap_shows_in_the_gap_series_with_its_cause() -> None:
    planted = glued_workload(0.003)
    served = prepare_call(planted, CPU, build_serving_model(planted, CPU), 1, EAGER)
    series, _ = gap_series(served, 15)
    assert series.gap is not None and series.gap.median > 0.003
    assert series.lead_cause() == BEFORE and series.flagged
    clean = glued_workload(0.0)
    served = prepare_call(clean, CPU, build_serving_model(clean, CPU), 1, EAGER)
    quiet, _ = gap_series(served, 15)
    assert quiet.gap is not None and quiet.gap.median < 0.001 and not quiet.flagged


def _result(points: list[BatchPoint], slo_ms: float = 0.0) -> ServingResult:
    settings = ServingSettings(batch_sizes=(1,), modes=(EAGER,), latency_slo_ms=slo_ms)
    slo = slo_answer(points, slo_ms, 0.99, EAGER, None, None) if slo_ms else None
    return ServingResult({"name": "w"}, {"name": "cpu"}, settings, "", "requests/s", points,
                         slo, [], [], None, None, None, [], "", "", 1.0, 1.0)  # fmt: skip


def _point(stable: bool = True, median: float = 0.001) -> BatchPoint:
    rng = random.Random(0)
    times = [median * (1 + rng.random() * 0.05) for _ in range(60)]
    windows = [Window(20, 20 * median, 1 / median, median)] * 3
    return BatchPoint(EAGER, 1, "ok", windows=windows, stable=stable, latency=Measurement(times))


def test_the_verdict_passes_a_stable_point_and_flags_what_its_rule_names() -> None:
    assert serving_verdict(_result([_point()], slo_ms=5.0)).status == "pass"
    assert serving_verdict(_result([_point(stable=False)])).status == "attention"
    missed = serving_verdict(_result([_point(median=0.01)], slo_ms=5.0))
    assert missed.status == "blocker" and "none meets it" in missed.reason
    failed = BatchPoint(EAGER, 8, "compile failed", error="cpu could not compile batch 8: boom")
    verdict = serving_verdict(_result([_point(), failed]))
    assert verdict.status == "attention" and "could not compile batch 8" in verdict.reason
    assert serving_verdict(_result([failed])).status == "blocker"


def test_settings_refuse_values_out_of_range() -> None:
    with pytest.raises(BadInput, match="slo_percentile"):
        ServingSettings(slo_percentile=100)
    with pytest.raises(BadInput, match="modes"):
        ServingSettings(modes=("fast",))
    with pytest.raises(BadInput, match="batch_sizes"):
        ServingSettings(batch_sizes=(0,))
    assert ServingSettings(modes=(EAGER,)).served_mode == EAGER


def test_serving_batch_sizes_are_bounded_before_anything_is_built() -> None:
    with pytest.raises(BadInput, match="at most 64 sizes of at most 65,536 samples each"):
        ServingSettings.from_params({"serving_batch_sizes": [1, 10**9]})
    with pytest.raises(BadInput, match="at most 64 sizes"):
        ServingSettings(batch_sizes=tuple(range(1, 66)))
    assert ServingSettings(batch_sizes=(1, 65_536)).batch_sizes == (1, 65_536)


def _spread_point(count: int) -> BatchPoint:
    rng = random.Random(1)
    times = [0.001 * (1 + rng.random()) + (0.01 if i % 97 == 0 else 0.0) for i in range(count)]
    windows = [Window(count // 3, count / 3 * 0.0015, 666.0, 0.0015)] * 3
    measured = {"latency": Measurement(times), "infer": Measurement([t * 0.9 for t in times])}
    return BatchPoint(EAGER, 1, "ok", windows=windows, stable=True, **measured)


def test_a_series_over_the_bound_is_stored_bounded_with_its_statistics_from_all_samples() -> None:
    over, under = _spread_point(3 * STORED_SAMPLES + 5), _spread_point(STORED_SAMPLES)
    data = result_data(_result([over, under]))
    stored, whole = data["points"][0]["latency"], data["points"][1]["latency"]
    latency = over.latency
    assert latency is not None and under.latency is not None
    assert len(stored["times"]) == stored["samples_stored"] == STORED_SAMPLES
    assert stored["samples_measured"] == len(latency.times)
    assert stored["times"][0] == latency.times[0] and stored["times"][-1] == latency.times[-1]
    # Statistics, the benchmark report and the tail still come from every sample.
    assert (stored["median"], stored["p99"], stored["max"]) == (
        latency.median, latency.p99, latency.max)  # fmt: skip
    assert data["points"][0]["benchmark_report"]["n_samples"] == len(latency.times)
    assert all(stored["times"][at] > latency.median for at in stored["discarded"])
    assert len(data["points"][0]["infer"]["times"]) == STORED_SAMPLES
    assert whole["times"] == under.latency.times and whole["discarded"] == under.latency.discarded
    assert whole["samples_stored"] == whole["samples_measured"] == STORED_SAMPLES
    note = data["sources"]["stored_samples"]
    assert f"{STORED_SAMPLES:,} of {len(latency.times):,}" in note
    assert f"{STORED_SAMPLES:,} of {STORED_SAMPLES:,}" in note
