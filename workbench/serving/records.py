"""Notebook 05's records: settings, what each section measured, the verdict rule and the shape of
05_serving.json.

A request is one sample; a call serves a batch of them, and every request in it finishes when
the call does, so a batch's latency samples are its calls' times and its throughput is requests
(samples) per second. A call is timed as an inference client sees it (perf_analyzer's compute
input, compute infer and compute output): the host inputs copied in to the target's device, the
model, and the outputs read back to the host, each also kept apart.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from workbench.checks import Serving
from workbench.errors import BadInput
from workbench.results import MeasuredOn
from workbench.safe_load import shown
from workbench.scorecard import ATTENTION, BLOCKER, Finding, Verdict, judge
from workbench.timing import (
    HOST_LOAD_RULE,
    Measurement,
    format_seconds,
    percentile_label,
    quantile,
    samples_for_percentile,
    tail_rule,
)

EAGER = "eager"
COMPILED = "compiled"
MODES = (EAGER, COMPILED)
TOKEN_CHOICES = ("auto", "on", "off")
# Bounds on what the sweep builds, checked before anything is: each size is a batch the workload
# makes and the model runs, and each is its own compiled shape. Served batches are in the tens
# to hundreds; 65,536 samples and 64 shapes leave room for any real sweep.
MAX_SERVING_BATCH = 1 << 16
MAX_SERVING_SIZES = 64

# The percentiles every batch point reports (NxD Inference's benchmark report keys, without p100,
# which is the maximum and always shown).
REPORTED_QUANTILES = (0.50, 0.90, 0.95, 0.99)
# perf_analyzer's stability rule: the last three windows agree within its default 10%.
STABLE_WINDOWS = 3
# perf_analyzer's count windows last at least one second (docs/cli.md, --measurement-mode), long
# enough for periodic interference (a collection, a timer, another process's burst) to land in
# every window instead of between them.
WINDOW_SECONDS = 1.0
# Three windows of this many requests reach LoadGen's minimum count for a p99 (662).
DEFAULT_WINDOW_REQUESTS = -(-samples_for_percentile(0.99) // STABLE_WINDOWS)
# A point keeps measuring until at least this long has been timed, so the machine-load reading
# around it covers a real window (timing.MIN_LOAD_WINDOW_S) instead of sleeping to fill one.
MIN_MEASURED_S = 0.2
# Above this many client streams per core, the clients' own scheduling, not the model, sets the
# latency a closed loop measures.
MAX_STREAMS_PER_CORE = 16
# Host gaps above this share of a call plus its gap are attention, when they are also longer
# than the floor: a Python serving loop's own bookkeeping costs a few microseconds per request,
# which is a large share of a tiny model's call and no finding.
HOST_GAP_SHARE = 0.10
HOST_GAP_FLOOR_S = 50e-6
# A tail this many times its median is set by something besides the compute of one call.
TAIL_LIMITED_RATIO = 1.5
# Open-loop rates tried when none are given: shares of the capacity one stream measured.
RATE_SHARES = (0.3, 0.6, 0.8, 0.95)

PointStatus = Literal["ok", "compile failed", "failed"]
LoopKind = Literal["closed", "open"]


def _tuple(value: Any, kind: type) -> tuple[Any, ...]:
    return tuple(kind(v) for v in value)


@dataclass(frozen=True)
class ServingSettings:
    """What notebook 05 measures, from its parameters (each field is one)."""

    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)
    modes: tuple[str, ...] = (COMPILED,)
    latency_slo_ms: float = 0.0  # 0: no SLO
    slo_percentile: float = 99.0
    window_requests: int = DEFAULT_WINDOW_REQUESTS
    window_seconds: float = WINDOW_SECONDS
    stability: float = 0.10
    window_budget_s: float = 10.0
    concurrency: tuple[int, ...] = (1, 2, 4)
    arrival_rates: tuple[float, ...] = ()
    arrival_requests: int = samples_for_percentile(0.99)
    load_budget_s: float = 3.0
    token_timings: str = "auto"
    prompt_lengths: tuple[int, ...] = (16, 64)
    output_lengths: tuple[int, ...] = (8, 32)
    token_repeats: int = 3
    token_mode: str = EAGER
    gap_requests: int = 100
    prices_file: str = ""
    instance_type: str = ""

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> ServingSettings:
        """The settings from notebook 05's parameters (a missing one keeps its default)."""
        default = cls()
        values: dict[str, Any] = {}
        # serving_batch_sizes: notebook 04's batch_sizes is its training sweep, another thing.
        values["batch_sizes"] = _tuple(params.get("serving_batch_sizes", default.batch_sizes), int)
        for name, kind in (
            ("modes", str),
            ("concurrency", int),
            ("arrival_rates", float),
            ("prompt_lengths", int),
            ("output_lengths", int),
        ):
            values[name] = _tuple(params.get(name, getattr(default, name)), kind)
        for name in (
            "latency_slo_ms",
            "slo_percentile",
            "window_requests",
            "window_seconds",
            "stability",
            "window_budget_s",
            "arrival_requests",
            "load_budget_s",
            "token_timings",
            "token_repeats",
            "token_mode",
            "gap_requests",
            "prices_file",
            "instance_type",
        ):
            values[name] = params.get(name, getattr(default, name))
        return cls(**values)

    def __post_init__(self) -> None:
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise BadInput(
                f"serving_batch_sizes {list(self.batch_sizes)}: give one or more sizes >= 1."
            )
        # Checked before any batch is built: 10^9 samples is stopped only by the allocator.
        if max(self.batch_sizes) > MAX_SERVING_BATCH or len(self.batch_sizes) > MAX_SERVING_SIZES:
            raise BadInput(
                f"serving_batch_sizes {shown(list(self.batch_sizes))}: give at most "
                f"{MAX_SERVING_SIZES} sizes of at most {MAX_SERVING_BATCH:,} samples each."
            )
        for name, values, allowed in (
            ("modes", self.modes, MODES),
            ("token_mode", (self.token_mode,), MODES),
            ("token_timings", (self.token_timings,), TOKEN_CHOICES),
        ):
            if not values or any(v not in allowed for v in values):
                raise BadInput(f"{name} {list(values)!r}: choose from {', '.join(allowed)}.")
        if self.latency_slo_ms < 0:
            raise BadInput(f"latency_slo_ms {self.latency_slo_ms}: use 0 (no SLO) or more.")
        if not 50 <= self.slo_percentile < 100:
            raise BadInput(
                f"slo_percentile {self.slo_percentile}: use a percentile from 50 to below 100."
            )
        if not 0 < self.stability < 1:
            raise BadInput(f"stability {self.stability}: use a share between 0 and 1 (0.1).")
        for name in ("window_requests", "arrival_requests", "gap_requests", "token_repeats"):
            if getattr(self, name) < 1:
                raise BadInput(f"{name} {getattr(self, name)}: use 1 or more.")
        for name in ("window_seconds", "window_budget_s", "load_budget_s"):
            if getattr(self, name) <= 0:
                raise BadInput(f"{name} {getattr(self, name)}: use a positive number of seconds.")
        if any(c < 1 for c in self.concurrency):
            raise BadInput(f"concurrency {list(self.concurrency)}: streams must be 1 or more.")
        if any(r <= 0 for r in self.arrival_rates):
            raise BadInput(f"arrival_rates {list(self.arrival_rates)}: rates must be positive.")
        if any(n < 1 for n in (*self.prompt_lengths, *self.output_lengths)):
            raise BadInput("prompt_lengths and output_lengths must be 1 or more tokens.")

    @property
    def quantile(self) -> float:
        """The SLO's percentile as a quantile (99 -> 0.99)."""
        return self.slo_percentile / 100

    @property
    def served_mode(self) -> str:
        """The mode the SLO, the load sections and the host gaps use: compiled where measured,
        as a service would run it."""
        return COMPILED if COMPILED in self.modes else EAGER


STABILITY_RULE_WORDS = (
    "a batch size is measured in count windows of at least {requests} requests and at least "
    "{seconds:g} s each (perf_analyzer's count windows: --measurement-request-count, and a "
    "window of at least 1 s); it is stable when the last "
    f"{STABLE_WINDOWS} windows' throughputs, and their {{label}} latencies (the percentile the "
    "SLO names: perf_analyzer's --percentile), each agree within {tolerance:.0%} (max/min, "
    "perf_analyzer's --stability-percentage; triton-inference-server/client "
    "src/c++/perf_analyzer/docs/cli.md); a point that is not stable within its {budget:g} s "
    "budget is reported as measured and marked unstable"
)


def stability_rule(settings: ServingSettings) -> str:
    return STABILITY_RULE_WORDS.format(
        requests=settings.window_requests,
        seconds=settings.window_seconds,
        label=percentile_label(settings.quantile),
        tolerance=settings.stability,
        budget=settings.window_budget_s,
    )


def window_percentile(times: list[float], q: float) -> float:
    """A window's q-th percentile as perf_analyzer computes the one it stabilises on (its
    inference_profiler: the sorted latency at index q * (n - 1) rounded to nearest)."""
    ordered = sorted(times)
    return ordered[int(q * (len(ordered) - 1) + 0.5)]


@dataclass(frozen=True)
class RequestTime:
    """One request's time in its parts, as perf_analyzer's server-side breakdown names them:
    compute input (the host inputs copied in to the device), compute infer (the model, the
    device synchronized) and compute output (the outputs read back to the host), in seconds."""

    input_copy: float
    infer: float
    output_copy: float

    @property
    def total(self) -> float:
        return self.input_copy + self.infer + self.output_copy


@dataclass
class Window:
    """One measurement window: its requests (calls), wall time, throughput and median."""

    calls: int
    seconds: float
    throughput: float  # requests (samples) per second over the window
    median: float  # median call latency, s
    tail: float = 0.0  # the window's latency at the SLO's percentile (window_percentile), s


def tail(measurement: Measurement, q: float) -> tuple[str, float, bool]:
    """The q-th percentile where the sample count supports it (timing.samples_for_percentile),
    else the maximum, named "max of n": (label, value, supported)."""
    label, value = measurement.tail(q)
    return label, value, measurement.supports(q)


@dataclass
class BatchPoint:
    """One batch size in one mode: its first call (the compile of this shape), the windows
    until stable, and the latency distribution of the last windows."""

    mode: str
    batch_size: int
    status: PointStatus
    items_per_sample: int = 1  # tokens per request for sequence workloads
    first_call: float | None = None  # s: where this shape's compile lands
    compiles: int | None = None  # graphs compiled by the first call (None: not counted)
    window_compiles: int = 0  # graphs compiled while the windows ran (a spike in serving)
    windows: list[Window] = field(default_factory=list)
    stable: bool = False
    latency: Measurement | None = None  # the last windows' call times, s
    # The same calls in their parts (RequestTime): input copy, model, output read-back.
    input_copy: Measurement | None = None
    infer: Measurement | None = None
    output_copy: Measurement | None = None
    host_peak_rss: int | None = None  # bytes, while the windows ran
    device_peak_allocated: int | None = None
    error: str = ""  # one sentence, for a point that did not measure

    @property
    def measured_windows(self) -> list[Window]:
        return self.windows[-STABLE_WINDOWS:]

    @property
    def throughput(self) -> float | None:
        """Requests per second over the windows the latency comes from."""
        windows = self.measured_windows
        seconds = sum(w.seconds for w in windows)
        if self.status != "ok" or seconds <= 0:
            return None
        return sum(w.calls for w in windows) * self.batch_size / seconds

    def tail(self, q: float) -> tuple[str, float, bool] | None:
        return tail(self.latency, q) if self.latency is not None else None

    @property
    def name(self) -> str:
        return f"batch {self.batch_size} {self.mode}"


REQUEST_TIMING = (
    "time.perf_counter around each request: its host inputs copied in to the target's device "
    "(Target.to_device, synchronized), the model (synchronized), its outputs read back to the "
    "host (Target.to_host); the three parts are kept apart as perf_analyzer's compute input, "
    "compute infer and compute output"
)
COMPILED_WHILE_TIMED = "graph(s) compiled while requests were timed"
JITTER = "jitter from other load, collection pauses, or the host between calls"


def tail_cause(point: BatchPoint) -> str:
    """What sets a point's tail, in the words the headline, the tables and the verdict share:
    graphs compiled inside the timed windows first (each is a spike, whatever else happened),
    then a machine the load probe read as loaded, else jitter of unknown source."""
    if point.window_compiles:
        return f"{point.window_compiles} {COMPILED_WHILE_TIMED} (each is a latency spike)"
    if point.latency is not None and point.latency.loaded and point.latency.host:
        return f"other load on the machine while timed ({point.latency.host.shares()})"
    return JITTER


def tail_limited(point: BatchPoint, q: float) -> bool:
    """Whether the point's q-th tail is TAIL_LIMITED_RATIO times its median or more, or graphs
    compiled while it was timed (then the tail is theirs, whatever its ratio)."""
    found = point.tail(q)
    if found is None or point.latency is None:
        return False
    return bool(point.window_compiles) or found[1] >= TAIL_LIMITED_RATIO * point.latency.median


def benchmark_report(point: BatchPoint) -> dict[str, Any]:
    """The point in NxD Inference's benchmark keys (latency_ms_p50 ... latency_ms_p100,
    latency_ms_avg, throughput), with the sample count and which percentiles it supports: the
    values are the plain interpolated percentiles NxD computes, the support says which of them
    a report may claim."""
    if point.latency is None:
        return {"n_samples": 0, "supported": [], "throughput": None}
    ordered = sorted(point.latency.times)
    report: dict[str, Any] = {
        f"latency_ms_p{round(q * 100)}": quantile(ordered, q) * 1e3 for q in REPORTED_QUANTILES
    }
    report["latency_ms_p100"] = ordered[-1] * 1e3
    report["latency_ms_avg"] = point.latency.mean * 1e3
    report["throughput"] = point.throughput
    report["n_samples"] = len(ordered)
    report["supported"] = [
        percentile_label(q) for q in REPORTED_QUANTILES if point.latency.supports(q)
    ] + ["p100"]
    return report


@dataclass
class SloAnswer:
    """The largest batch whose measured percentile meets the SLO, or the closest one and what
    holds it back."""

    slo_ms: float
    percentile: float
    mode: str
    chosen: int | None  # batch size; None: none meets it
    tail_label: str  # "p99" or "max of 480": what was compared with the SLO
    tail_ms: float | None
    throughput: float | None
    closest: int | None = None  # when none meets it: the batch with the lowest tail
    limit: str = ""  # what limits the closest batch, one sentence
    cost_per_1000: float | None = None  # USD per 1,000 requests at the chosen batch
    cost_note: str = ""

    def sentence(self, unit: str) -> str:
        head = f"{percentile_label(self.percentile / 100)} SLO {self.slo_ms:g} ms ({self.mode})"
        if self.chosen is None:
            if self.closest is None:
                return f"{head}: no batch size was measured"
            return (
                f"{head}: none meets it; the closest is batch {self.closest} at "
                f"{self.tail_label} = {self.tail_ms:.3g} ms: {self.limit}"
            )
        text = (
            f"{head}: largest batch that meets it is {self.chosen} ({self.tail_label} = "
            f"{self.tail_ms:.3g} ms), {self.throughput:,.0f} {unit}"
        )
        if self.cost_per_1000 is not None:
            text += f", ${self.cost_per_1000:.4g} per 1,000 requests"
        return text


@dataclass
class LoadPoint:
    """One load level: N closed-loop streams, or an open-loop Poisson rate, at batch 1 through
    one model instance that serves one request at a time. Latency is from the request's arrival
    (its scheduled time, in the open loop) to its completion: queueing delay plus compute."""

    loop: LoopKind
    streams: int | None  # closed loop
    rate: float | None  # open loop: offered requests per second
    requests: int  # completed
    seconds: float  # from the first arrival to the last completion
    latency: Measurement | None
    queue: Measurement | None
    compute: Measurement | None
    slo_held: bool | None = None  # None: no SLO
    cut_short: bool = False  # the budget ended the level before all its requests

    @property
    def achieved(self) -> float | None:
        return self.requests / self.seconds if self.seconds > 0 else None

    @property
    def name(self) -> str:
        if self.loop == "closed":
            return f"{self.streams} stream(s)"
        return f"{self.rate:,.0f} req/s"


@dataclass
class TokenCell:
    """One (prompt length, output length) of a generating model, batch 1: prefill and decode
    apart, from the measured repeats (a first, warm-up repeat compiles every new shape)."""

    prompt: int
    output: int
    ttft: Measurement | None = None  # prefill call plus the first token, s
    prefill: Measurement | None = None  # the prefill call alone
    tpot: Measurement | None = None  # time per output token after the first (each interval)
    decode_call: Measurement | None = None  # each decode forward alone
    decode_gap: Measurement | None = None  # between two decode forwards: sampling, cache update
    warmup_compiles: int | None = None  # graphs compiled by the warm-up repeat
    measured_compiles: int | None = None  # graphs compiled by the measured repeats
    error: str = ""

    @property
    def tokens_per_second(self) -> float | None:
        if self.ttft is None or self.tpot is None:
            return None
        total = self.ttft.median + self.tpot.median * (self.output - 1)
        return self.output / total if total > 0 else None


@dataclass
class TokenStudy:
    mode: str
    cells: list[TokenCell]
    prefill_shapes: int  # distinct prompt lengths: one compile each on Neuron
    decode_shapes: int  # distinct KV-cache lengths the decode steps see: one compile each
    prefill_buckets: list[int]  # bucket lengths (tuning/buckets.py) that hold the prompts
    decode_buckets: list[int]
    statement: str  # the static-shape consequence, in words

    @property
    def measured_compiles(self) -> int | None:
        counts = [c.warmup_compiles for c in self.cells if c.warmup_compiles is not None]
        return sum(counts) if counts else None


@dataclass
class GapSeries:
    """Time between consecutive device executions (one per pair of consecutive model calls), as
    its own series, each gap with its cause."""

    where: str
    gaps: list[float]  # s
    calls: list[float]  # each model call, synchronized, s
    causes: list[str]  # one per gap
    device_seconds: list[float] | None  # the runtime's execution time per call, where reported
    source: str

    @property
    def gap(self) -> Measurement | None:
        return Measurement(self.gaps) if self.gaps else None

    @property
    def share(self) -> float:
        """The median gap's share of a call plus its gap: the device's idle share."""
        if not self.gaps or not self.calls:
            return 0.0
        gap, call = Measurement(self.gaps).median, Measurement(self.calls).median
        return gap / (gap + call) if gap + call > 0 else 0.0

    @property
    def flagged(self) -> bool:
        """Whether the gaps are a finding: above HOST_GAP_SHARE and HOST_GAP_FLOOR_S."""
        gap = self.gap
        return gap is not None and self.share > HOST_GAP_SHARE and gap.median > HOST_GAP_FLOOR_S

    def lead_cause(self) -> str:
        """The cause behind most of the gap time."""
        totals: dict[str, float] = {}
        for gap, cause in zip(self.gaps, self.causes, strict=True):
            totals[cause] = totals.get(cause, 0.0) + gap
        return max(totals, key=totals.__getitem__) if totals else ""

    def host_in_call(self) -> Measurement | None:
        """Host time inside each call (tracing, launch): the call less the runtime's execution
        time, where the target reports it."""
        if not self.device_seconds or len(self.device_seconds) != len(self.calls):
            return None
        pairs = zip(self.calls, self.device_seconds, strict=True)
        return Measurement([max(call - device, 0.0) for call, device in pairs])

    def sentence(self) -> str:
        gap = self.gap
        if gap is None:
            return f"{self.where}: no gap measured"
        text = (
            f"{self.where}: median gap {format_seconds(gap.median)} between device executions "
            f"({self.share:.0%} of each call plus gap), mostly {self.lead_cause()}"
        )
        inside = self.host_in_call()
        if inside is not None:
            text += (
                f"; inside each call the host adds {format_seconds(inside.median)} (median) to "
                "the runtime's execution time"
            )
        return text


@dataclass
class Problem:
    """A request this run could not serve as asked, one sentence; the rest was measured."""

    section: str
    sentence: str


@dataclass
class ServingResult(MeasuredOn):
    settings: ServingSettings
    compiled_means: str
    throughput_unit: str  # requests/s
    points: list[BatchPoint]
    slo: SloAnswer | None
    closed_loop: list[LoadPoint]
    open_loop: list[LoadPoint]
    highest_rate: float | None  # open-loop rate (req/s) at which the SLO still held
    tokens: TokenStudy | None
    gaps: GapSeries | None
    problems: list[Problem]
    host_memory_source: str
    device_memory_source: str
    wall_seconds: float
    measured_seconds: float  # time inside timed calls and load windows

    def served(self) -> list[BatchPoint]:
        mode = self.settings.served_mode
        return [p for p in self.points if p.mode == mode]

    def point(self, batch: int, mode: str) -> BatchPoint | None:
        return next((p for p in self.points if p.batch_size == batch and p.mode == mode), None)

    def headline(self) -> str:
        target = self.target.get("name", "?")
        q = self.settings.quantile
        parts = []
        if self.slo is not None:
            parts.append(self.slo.sentence(self.throughput_unit))
        one = self.point(1, self.settings.served_mode)
        if one is not None and one.tail(q) is not None:
            label, value, _ = one.tail(q)  # type: ignore[misc]
            assert one.latency is not None
            parts.append(
                f"batch 1 ({one.mode}): median {format_seconds(one.latency.median)}, {label} = "
                f"{format_seconds(value)} ({len(one.latency.times)} samples)"
            )
        best = max(
            (p for p in self.served() if p.throughput),
            key=lambda p: p.throughput or 0,
            default=None,
        )
        if best is not None and best.throughput:
            parts.append(
                f"most throughput at batch {best.batch_size}: "
                f"{best.throughput:,.0f} {self.throughput_unit}"
            )
        if self.highest_rate is not None:
            parts.append(f"the SLO holds up to {self.highest_rate:,.0f} req/s (open loop)")
        if self.tokens is not None:
            cell = next((c for c in self.tokens.cells if c.ttft and c.tpot), None)
            if cell is not None and cell.ttft and cell.tpot:
                parts.append(
                    f"prompt {cell.prompt}: TTFT {format_seconds(cell.ttft.median)}, TPOT "
                    f"{format_seconds(cell.tpot.median)}"
                )
        if not parts:
            parts.append("no batch size could be served")
        return f"On {target}, " + "; ".join(parts) + "."


SERVING_RULE = (
    "blocker: no batch size could be served, a graph compiled while requests were being timed, "
    "or no batch meets the latency SLO; attention: a batch size that failed or did not compile, "
    "a point that never stabilised within its budget, a point timed on a loaded machine, no "
    "open-loop rate held the SLO, host gaps (median) above "
    f"{HOST_GAP_SHARE:.0%} of a call plus its gap and above {HOST_GAP_FLOOR_S * 1e6:g} µs, "
    "or a request the run could not serve as asked (a concurrency the machine cannot give, "
    "token timings without generate, a token shape that failed); pass otherwise"
)


def serving_verdict(result: ServingResult) -> Verdict:
    """Notebook 05's verdict, by SERVING_RULE."""
    findings = []
    ok = [p for p in result.points if p.status == "ok"]
    if not ok:
        findings.append(Finding(BLOCKER, "no batch size could be served", Serving.SERVES))
    for point in result.points:
        if point.status != "ok":
            findings.append(Finding(ATTENTION, f"{point.name}: {point.error}", Serving.POINTS))
            continue
        if point.window_compiles:
            findings.append(Finding(BLOCKER, f"{point.name}: {tail_cause(point)}", Serving.WINDOW))
        if not point.stable:
            findings.append(
                Finding(
                    ATTENTION,
                    f"{point.name}: the windows never agreed within "
                    f"{result.settings.stability:.0%} in {result.settings.window_budget_s:g} s",
                    Serving.AGREE,
                )
            )
        if point.latency is not None and point.latency.loaded and point.latency.host:
            findings.append(
                Finding(
                    ATTENTION,
                    f"{point.name}: timed on a loaded machine ({point.latency.host.shares()})",
                    Serving.QUIET,
                )
            )
    if result.slo is not None and result.slo.chosen is None and ok:
        findings.append(Finding(BLOCKER, result.slo.sentence(result.throughput_unit), Serving.SLO))
    if result.slo is not None and result.open_loop and result.highest_rate is None:
        findings.append(
            Finding(
                ATTENTION,
                "no open-loop request rate held the SLO, even the lowest tried",
                Serving.OPEN_LOOP,
            )
        )
    if result.gaps is not None and result.gaps.flagged:
        findings.append(Finding(ATTENTION, f"host gaps: {result.gaps.sentence()}", Serving.GAPS))
    for problem in result.problems:
        findings.append(
            Finding(ATTENTION, f"{problem.section}: {problem.sentence}", Serving.SECTIONS)
        )
    return judge(
        findings,
        SERVING_RULE,
        "every batch size served and stabilised, nothing compiled while timed"
        + (", and a batch meets the SLO" if result.slo is not None else ""),
    )


# Raw samples 05_serving.json keeps per series. A 77 µs call fills its windows with ~37,000
# calls in four series (the call and its three parts), ~24 MB of JSON for the default sweep, and
# a call under ~50 µs would pass the result-file bound (safe_load). 2,048 is above LoadGen's 662
# for a p99, so a reader of the file can still claim one, and keeps the default file near 2 MB.
STORED_SAMPLES = 2048


def stored_indices(count: int, bound: int = STORED_SAMPLES) -> list[int]:
    """Which of `count` samples in time order the file keeps: all up to `bound`, else `bound`
    evenly spaced in time, the first and the last among them."""
    if count <= bound:
        return list(range(count))
    return [round(i * (count - 1) / (bound - 1)) for i in range(bound)]


def stored_measurement(measurement: Measurement | None) -> dict[str, Any] | None:
    """A measurement as the file keeps it: every statistic from all its samples, at most
    STORED_SAMPLES of the raw samples (stored_indices), how many of how many, and `discarded`
    as positions in the stored samples."""
    if measurement is None:
        return None
    picked = stored_indices(len(measurement.times))
    left_out = set(measurement.discarded)
    return {
        **asdict(measurement),
        "times": [measurement.times[i] for i in picked],
        "discarded": [at for at, i in enumerate(picked) if i in left_out],
        "samples_stored": len(picked),
        "samples_measured": len(measurement.times),
    }


def stored_samples_note(result: ServingResult) -> str:
    """What the result file keeps of each batch point's raw samples, said once for the file and
    the report: "N of M samples stored" per point."""
    counts = [
        f"{p.name} {len(stored_indices(len(p.latency.times))):,} of {len(p.latency.times):,}"
        for p in result.points
        if p.latency is not None
    ]
    return (
        f"05_serving.json keeps at most {STORED_SAMPLES:,} raw samples per series, evenly spaced "
        "in time (first and last kept); every statistic, here and in the file, comes from all "
        "samples. Samples stored: " + ("; ".join(counts) or "none measured")
    )


def _point_data(point: BatchPoint, q: float) -> dict[str, Any]:
    found = point.tail(q)
    return {
        **asdict(point),
        "latency": stored_measurement(point.latency),
        "input_copy": stored_measurement(point.input_copy),
        "infer": stored_measurement(point.infer),
        "output_copy": stored_measurement(point.output_copy),
        "throughput": point.throughput,
        "tail_label": found[0] if found else None,
        "tail": found[1] if found else None,
        "benchmark_report": benchmark_report(point),
    }


def _load_data(point: LoadPoint) -> dict[str, Any]:
    return {
        **asdict(point),
        "latency": stored_measurement(point.latency),
        "queue": stored_measurement(point.queue),
        "compute": stored_measurement(point.compute),
        "achieved": point.achieved,
    }


def result_data(result: ServingResult) -> dict[str, Any]:
    """Everything 05_serving.json keeps; raw samples sit under each measurement's times, at most
    STORED_SAMPLES of them per series (stored_measurement)."""
    settings = result.settings
    q = settings.quantile
    return {
        "headline": result.headline(),
        "verdict": serving_verdict(result),
        "target": result.target | {"compiled_means": result.compiled_means},
        "workload": result.workload,
        "settings": asdict(settings),
        "throughput_unit": result.throughput_unit,
        "points": [_point_data(p, q) for p in result.points],
        # NxD Inference's benchmark keys per batch size and mode, to set beside its own report.
        "benchmark_report": {
            f"batch_{p.batch_size}_{p.mode}": benchmark_report(p) for p in result.points
        },
        "slo": result.slo,
        "closed_loop": [_load_data(p) for p in result.closed_loop],
        "open_loop": [_load_data(p) for p in result.open_loop],
        "highest_rate": result.highest_rate,
        "tokens": result.tokens,
        "gaps": result.gaps,
        "problems": result.problems,
        "sources": {
            "timing": REQUEST_TIMING,
            "stability": stability_rule(settings),
            "percentiles": tail_rule(),
            "load": (
                "one model instance serving one request at a time from a queue; closed loop: N "
                "client streams, each sending its next request when the last returns; open "
                "loop: Poisson arrivals (MLPerf's server scenario), latency from the scheduled "
                "arrival"
            ),
            "host_load": HOST_LOAD_RULE,
            "stored_samples": stored_samples_note(result),
            "host_memory": result.host_memory_source,
            "device_memory": result.device_memory_source,
            "cpu_cores": os.cpu_count(),
        },
        "wall_seconds": result.wall_seconds,
        "measured_seconds": result.measured_seconds,
    }
