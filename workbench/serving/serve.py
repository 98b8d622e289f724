"""Notebook 05's sections in order: the batch sweep, the SLO's answer, batch 1 under load (closed
and open loop), the host-gap series, and token timings for a generating model. A section that
cannot do what was asked says so in one sentence (a Problem) and the others still measure."""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter

from workbench.environment.instance import resolve_instance_type
from workbench.processes import usable_cores
from workbench.serving.calls import ServedCall, build_serving_model, prepare_call
from workbench.serving.gaps import gap_series
from workbench.serving.load import closed_loop, open_loop
from workbench.serving.records import (
    MAX_STREAMS_PER_CORE,
    RATE_SHARES,
    GapSeries,
    LoadPoint,
    Problem,
    ServingResult,
    ServingSettings,
    TokenStudy,
)
from workbench.serving.slo import highest_held_rate, slo_answer
from workbench.serving.sweep import sweep
from workbench.serving.tokens import generates, token_study
from workbench.targets.base import Target
from workbench.timing import HostPeakRss, format_seconds
from workbench.tuning.cost import load_prices
from workbench.workload import Workload

THROUGHPUT_UNIT = "requests/s"


class Sections:
    """One run of the notebook's sections, collecting points, problems and timed seconds."""

    def __init__(
        self,
        workload: Workload,
        target: Target,
        settings: ServingSettings,
        log: Callable[[str], None],
    ) -> None:
        self.workload = workload
        self.target = target
        self.settings = settings
        self.log = log
        self.problems: list[Problem] = []
        self.measured = 0.0
        self.slo_s = settings.latency_slo_ms / 1e3 if settings.latency_slo_ms else None

    def problem(self, section: str, sentence: str) -> None:
        self.problems.append(Problem(section, sentence))
        self.log(f"{section}: {sentence}")

    def batch_one(self) -> ServedCall | None:
        """Batch 1 in the served mode, compiled afresh and warmed by one call; None (and a
        problem) where it cannot be."""
        mode = self.settings.served_mode
        model = build_serving_model(self.workload, self.target)
        try:
            served = prepare_call(self.workload, self.target, model, 1, mode)
            served.timed()
        except Exception as exc:  # ShapeFailed, or the first call raising
            self.problem(
                "load",
                f"batch 1 ({mode}) could not be prepared on {self.target.name} ({exc}), so the "
                "load and host-gap sections did not run",
            )
            return None
        return served

    def closed(self, served: ServedCall) -> list[LoadPoint]:
        settings = self.settings
        cap = MAX_STREAMS_PER_CORE * usable_cores()
        levels = [n for n in settings.concurrency if n <= cap]
        refused = [n for n in settings.concurrency if n > cap]
        if refused:
            self.problem(
                "concurrency",
                f"{', '.join(map(str, refused))} concurrent stream(s) need that many client "
                f"threads, more than the {cap} this machine's {usable_cores()} core(s) can drive "
                "without the clients' own scheduling setting the latency; measured up to "
                f"{max(levels, default=0)}",
            )
        return [self._level(closed_loop, served, streams) for streams in levels]

    def open(self, served: ServedCall, capacity: float | None) -> list[LoadPoint]:
        settings = self.settings
        rates = list(settings.arrival_rates)
        if not rates and capacity:
            rates = [round(capacity * share, 1) for share in RATE_SHARES]
        return [self._level(open_loop, served, rate) for rate in rates]

    def _level(self, loop: Callable[..., LoadPoint], served: ServedCall, level: float) -> LoadPoint:
        """One load level (streams for the closed loop, a rate for the open one), counted as
        measured time and logged."""
        settings = self.settings
        point = loop(
            served.call, level, settings.arrival_requests, settings.load_budget_s, self.slo_s,
            settings.quantile,
        )  # fmt: skip
        self.measured += point.seconds
        self.log(_load_line(point))
        return point

    def gaps(self, served: ServedCall) -> GapSeries:
        series, seconds = gap_series(served, self.settings.gap_requests)
        self.measured += seconds
        self.log(series.sentence())
        return series

    def tokens(self) -> TokenStudy | None:
        asked = self.settings.token_timings
        if asked == "off":
            return None
        model = build_serving_model(self.workload, self.target)
        if not generates(model):
            if asked == "on":
                self.problem(
                    "tokens",
                    f"{self.workload.name} ({type(model).__name__}) has no generate: token "
                    "timings need a generating language model (a Hugging Face causal LM)",
                )
            return None
        study, skipped, seconds = token_study(self.workload, self.target, model, self.settings)
        self.measured += seconds
        for cell in study.cells:
            if cell.ttft is not None and cell.tpot is not None:
                self.log(
                    f"tokens prompt {cell.prompt}, output {cell.output}: TTFT "
                    f"{format_seconds(cell.ttft.median)}, TPOT {format_seconds(cell.tpot.median)}, "
                    f"{cell.warmup_compiles} compile(s) in the warm-up"
                )
        for sentence in skipped:
            self.problem("tokens", sentence)
        return study


def _load_line(point: LoadPoint) -> str:
    if point.latency is None or point.queue is None:
        return f"{point.loop} loop {point.name}: no request completed"
    return (
        f"{point.loop} loop {point.name}: {point.achieved or 0:,.0f} req/s served, latency "
        f"median {format_seconds(point.latency.median)} (queue "
        f"{format_seconds(point.queue.median)})"
        + (", CUT SHORT by its budget" if point.cut_short else "")
    )


def run_serving(
    workload: Workload,
    target: Target,
    settings: ServingSettings | None = None,
    *,
    log: Callable[[str], None] = print,
) -> ServingResult:
    """Every section of notebook 05, in order; nothing a section cannot do stops the others."""
    settings = settings or ServingSettings()
    started = perf_counter()
    host = HostPeakRss()
    run = Sections(workload, target, settings, log)
    points, run.measured = sweep(workload, target, settings, host, log)
    for point in points:
        if point.status != "ok" and point.mode == settings.served_mode:
            log(f"sweep: {point.error}")
    slo = None
    if settings.latency_slo_ms:
        prices = load_prices(settings.prices_file)
        instance = resolve_instance_type(settings.instance_type)
        slo = slo_answer(
            points, settings.latency_slo_ms, settings.quantile, settings.served_mode, prices,
            instance,
        )  # fmt: skip
        log(slo.sentence(THROUGHPUT_UNIT))
    closed: list[LoadPoint] = []
    opened: list[LoadPoint] = []
    gaps = None
    served = run.batch_one()
    if served is not None:
        closed = run.closed(served)
        one_stream = next((p for p in closed if p.streams == 1 and p.achieved), None)
        capacity = one_stream.achieved if one_stream else None
        if capacity is None:
            one = next((p for p in points if p.batch_size == 1 and p.throughput), None)
            capacity = one.throughput if one else None
        opened = run.open(served, capacity)
        gaps = run.gaps(served)
    tokens = run.tokens()
    return ServingResult(
        workload=workload.describe(),
        target=target.describe(),
        settings=settings,
        compiled_means=target.compile_description,
        throughput_unit=THROUGHPUT_UNIT,
        points=points,
        slo=slo,
        closed_loop=closed,
        open_loop=opened,
        highest_rate=highest_held_rate(opened),
        tokens=tokens,
        gaps=gaps,
        problems=run.problems,
        host_memory_source=host.source,
        device_memory_source=target.peak_memory().source,
        wall_seconds=perf_counter() - started,
        measured_seconds=run.measured,
    )
