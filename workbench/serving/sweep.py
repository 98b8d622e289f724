"""The batch sweep: every batch size in every mode asked, each its own shape: first call (the
compile of that shape), then windows until stable, with peak memory and the machine's load."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from workbench.errors import describe_error
from workbench.serving.calls import ShapeFailed, build_serving_model, prepare_call
from workbench.serving.records import COMPILED, BatchPoint, ServingSettings
from workbench.serving.windows import measure_windows
from workbench.targets.base import Target
from workbench.timing import HostLoadProbe, HostPeakRss, Measurement, format_seconds
from workbench.workload import Workload


def _graphs(target: Target) -> int | None:
    return target.compile_counters().graphs


def _moved(before: int | None, after: int | None) -> int | None:
    return None if before is None or after is None else after - before


def _first_line(exc: BaseException) -> str:
    return describe_error(exc).text.splitlines()[0]


# Untimed calls after the first, until one compiles nothing: a forward that caches state on
# its first call (a mask it builds once, as pytorch/examples' word-language Transformer does)
# compiles again on its second, which is warm-up, not a spike in serving. A shape that still
# compiles after these keeps recompiling, and its windows say so.
SETTLING_CALLS = 3


def _settle(call: Callable[[], object], target: Target) -> None:
    for _ in range(SETTLING_CALLS):
        mark = _graphs(target)
        call()
        if not _moved(mark, _graphs(target)):
            return


def measure_point(
    workload: Workload,
    target: Target,
    model: nn.Module,
    batch_size: int,
    mode: str,
    settings: ServingSettings,
    host: HostPeakRss,
) -> tuple[BatchPoint, float]:
    """One batch size in one mode, and the seconds its timed calls took. A shape that does not
    compile, or a call that raises, ends this point with one sentence; the sweep goes on."""
    items = workload.items_per_sample()
    point = BatchPoint(mode, batch_size, "ok", items)
    try:
        served = prepare_call(workload, target, model, batch_size, mode)
    except ShapeFailed as exc:
        point.status = "compile failed"
        point.error = f"{target.name} could not compile batch {batch_size}: {exc}"
        return point, 0.0
    before = _graphs(target)
    try:
        point.first_call = served.timed()
    except Exception as exc:
        compile_failed = mode == COMPILED
        point.status = "compile failed" if compile_failed else "failed"
        verb = "compile" if compile_failed else "run"
        point.error = f"{target.name} could not {verb} batch {batch_size}: {_first_line(exc)}"
        return point, 0.0
    _settle(served.call, target)
    point.compiles = _moved(before, _graphs(target))
    host.reset()
    target.reset_peak_memory()
    before = _graphs(target)
    probe = HostLoadProbe()
    try:
        with probe:
            run = measure_windows(
                served.request,
                requests=settings.window_requests,
                tolerance=settings.stability,
                budget_s=settings.window_budget_s,
                quantile=settings.quantile,
                min_window_s=settings.window_seconds,
                batch_size=batch_size,
            )
    except Exception as exc:
        point.status = "failed"
        point.error = f"batch {batch_size} raised while timed: {_first_line(exc)}"
        return point, point.first_call
    point.window_compiles = _moved(before, _graphs(target)) or 0
    point.windows = run.windows
    point.stable = run.stable
    point.latency = Measurement(run.latency_samples(), host=probe.result)
    reported = run.reported()
    point.input_copy = Measurement([t.input_copy for t in reported])
    point.infer = Measurement([t.infer for t in reported])
    point.output_copy = Measurement([t.output_copy for t in reported])
    point.host_peak_rss = host.peak()
    point.device_peak_allocated = target.peak_memory().peak_allocated
    return point, point.first_call + run.timed_seconds


def _line(point: BatchPoint) -> str:
    if point.status != "ok" or point.latency is None:
        return f"{point.name}: {point.error}"
    state = "stable" if point.stable else "NOT STABLE"
    return (
        f"{point.name}: first call {format_seconds(point.first_call or 0)}, "
        f"{len(point.windows)} window(s) ({state}), median "
        f"{format_seconds(point.latency.median)}, {point.throughput or 0:,.0f} req/s"
    )


def sweep(
    workload: Workload,
    target: Target,
    settings: ServingSettings,
    host: HostPeakRss,
    log: Callable[[str], None] = print,
) -> tuple[list[BatchPoint], float]:
    """Every (mode, batch size), modes in the order asked; and the seconds of timed calls."""
    points = []
    measured = 0.0
    sizes = settings.batch_sizes
    if workload.fixed_batch:
        sizes = (workload.batch_size,)
        log(f"serving batch {workload.batch_size} only: {workload.fixed_batch}")
    for mode in settings.modes:
        model = build_serving_model(workload, target)
        for batch_size in sizes:
            point, seconds = measure_point(
                workload, target, model, batch_size, mode, settings, host
            )
            points.append(point)
            measured += seconds
            log(_line(point))
    return points, measured
