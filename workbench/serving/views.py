"""What notebook 05 shows of a serving result: tables and banners only, no measuring."""

from __future__ import annotations

from typing import Any

from IPython.display import display

from workbench import markup as show
from workbench.serving.records import (
    REPORTED_QUANTILES,
    REQUEST_TIMING,
    BatchPoint,
    LoadPoint,
    ServingResult,
    benchmark_report,
    serving_verdict,
    stability_rule,
    stored_samples_note,
    tail_cause,
    tail_limited,
)
from workbench.timing import (
    HOST_LOAD_RULE,
    Measurement,
    format_seconds,
    percentile_label,
    samples_for_percentile,
    tail_rule,
)


def _percentile(measurement: Measurement | None, q: float) -> str:
    """The q-th percentile where the samples support it; else how many it needs."""
    if measurement is None:
        return "n/a"
    value = measurement.percentile(q)
    if value is None:
        return f"— (needs {samples_for_percentile(q)})"
    return format_seconds(value)


def _tail(measurement: Measurement | None, q: float) -> str:
    """'p99: 1.2 ms' where supported, else 'max of 150: 1.4 ms'."""
    if measurement is None:
        return "n/a"
    label, value = measurement.tail(q)
    return f"{label}: {format_seconds(value)}"


def _median(measurement: Measurement | None) -> str:
    return "n/a" if measurement is None else format_seconds(measurement.median)


def _point_row(point: BatchPoint, unit: str, q: float) -> dict[str, Any]:
    latency = point.latency
    row: dict[str, Any] = {"mode": point.mode, "batch": point.batch_size, "status": point.status}
    if point.status != "ok" or latency is None:
        row["samples"] = 0
        row["what happened"] = point.error
        return row
    row["samples"] = len(latency.times)
    for q in REPORTED_QUANTILES:
        row[percentile_label(q)] = _percentile(latency, q)
    row["max"] = f"{format_seconds(latency.max)} (max of {len(latency.times)})"
    row["input copy (median)"] = _median(point.input_copy)
    row["infer (median)"] = _median(point.infer)
    row["output read-back (median)"] = _median(point.output_copy)
    row[unit] = f"{point.throughput or 0:,.0f}"
    row["stable"] = f"yes, {len(point.windows)} windows" if point.stable else "NO"
    row["what sets the tail"] = tail_cause(point) if tail_limited(point, q) else ""
    return row


def _cost_row(point: BatchPoint) -> dict[str, Any]:
    return {
        "mode": point.mode,
        "batch": point.batch_size,
        "first call (compile of this shape)": show.seconds_cell(point.first_call),
        "graphs compiled": "n/a" if point.compiles is None else point.compiles,
        "compiled while timed": point.window_compiles,
        "peak host RSS": show.mib_cell(point.host_peak_rss),
        "peak device": show.mib_cell(point.device_peak_allocated),
        "machine": point.latency.host.sentence() if point.latency and point.latency.host else "",
    }


def headline(result: ServingResult) -> None:
    """The sentence that reads the result, then the batch sweep it rests on."""
    # The report opens with this headline, read from the result file: here for the live view.
    banner = show.banner(result.headline(), show.VERDICT_BANNER[serving_verdict(result).status])
    display(banner, metadata=show.LIVE_ONLY)
    display(
        show.table(
            [
                _point_row(p, result.throughput_unit, result.settings.quantile)
                for p in result.points
            ],
            caption=(
                f"{result.workload['name']} on {result.target['name']}: latency per call (every "
                "request of a batch finishes with its call: inputs copied in, the model, outputs "
                f"read back, each also shown apart); {tail_rule()}; the whole notebook part took "
                f"{format_seconds(result.wall_seconds)}, {format_seconds(result.measured_seconds)} "
                "of it in timed calls"
            ),
        )
    )


def sweep_costs(result: ServingResult) -> None:
    """Compile, memory and machine state per batch size."""
    display(
        show.table(
            [_cost_row(p) for p in result.points if p.status == "ok"],
            caption=f"Compile and memory per shape; compiled means: {result.compiled_means}",
        )
    )
    display(
        show.key_values(
            {
                "timing": REQUEST_TIMING,
                "stability": stability_rule(result.settings),
                "machine": HOST_LOAD_RULE,
                "samples stored": stored_samples_note(result),
                "host memory": result.host_memory_source,
                "device memory": result.device_memory_source,
            },
            caption="Where the numbers come from",
        )
    )


NO_SLO = (
    "No latency SLO was given: rerun with -p latency_slo_ms=... (and -p slo_percentile=99) for "
    "the largest batch that meets it."
)
NO_TOKENS = (
    "No token timings: the workload is not a generating language model (or token_timings=off)."
)


def slo(result: ServingResult) -> None:
    """The SLO's answer, or how to ask for one."""
    answer = result.slo
    if answer is None:
        display(show.banner(NO_SLO, "info"))
        return
    kind = "ok" if answer.chosen is not None else "fail"
    display(show.banner(answer.sentence(result.throughput_unit), kind))
    pairs = {
        "judged by": (
            f"each batch's {percentile_label(answer.percentile / 100)} where its samples support "
            "one, else its maximum (stricter), named in the tail column"
        ),
        "cost per 1,000 requests": (
            "n/a" if answer.cost_per_1000 is None else f"${answer.cost_per_1000:.4g}"
        ),
        "price": answer.cost_note or "not priced",
    }
    display(show.key_values(pairs, caption="The SLO"))


def _load_row(point: LoadPoint) -> dict[str, Any]:
    q = 0.99
    return {
        "load": point.name,
        "requests": point.requests,
        "served req/s": f"{point.achieved or 0:,.0f}",
        "latency median": show.seconds_cell(point.latency.median if point.latency else None),
        "latency tail": _tail(point.latency, q),
        "queueing median": show.seconds_cell(point.queue.median if point.queue else None),
        "compute median": show.seconds_cell(point.compute.median if point.compute else None),
        "SLO held": "n/a" if point.slo_held is None else ("yes" if point.slo_held else "NO"),
        "cut short": "yes" if point.cut_short else "",
    }


def load(result: ServingResult) -> None:
    """Batch 1 under closed-loop streams and open-loop arrival rates."""
    if not result.closed_loop and not result.open_loop:
        display(show.banner("The load sections did not run (see the problems below).", "warn"))
        return
    if result.closed_loop:
        display(
            show.table(
                [_load_row(p) for p in result.closed_loop],
                caption="Closed loop: N streams, each sending its next request when its last "
                "returns; one model instance serves one request at a time",
            )
        )
    if result.open_loop:
        rate = result.highest_rate
        caption = "Open loop: Poisson arrivals (MLPerf's server scenario); latency counts from "
        caption += "each request's scheduled arrival"
        if result.slo is not None:
            caption += (
                f"; the SLO holds up to {rate:,.0f} req/s"
                if rate is not None
                else "; the SLO held at no rate tried"
            )
        display(show.table([_load_row(p) for p in result.open_loop], caption=caption))


def tokens(result: ServingResult) -> None:
    """Prefill and decode apart, per prompt and output length."""
    study = result.tokens
    if study is None:
        display(show.banner(NO_TOKENS, "info"))
        return
    rows = []
    for cell in study.cells:
        rows.append(
            {
                "prompt": cell.prompt,
                "output": cell.output,
                "TTFT median": show.seconds_cell(cell.ttft.median if cell.ttft else None),
                "prefill call": show.seconds_cell(cell.prefill.median if cell.prefill else None),
                "TPOT median": show.seconds_cell(cell.tpot.median if cell.tpot else None),
                "TPOT tail": _tail(cell.tpot, 0.99),
                "decode call": show.seconds_cell(
                    cell.decode_call.median if cell.decode_call else None
                ),
                "gap between decode calls": show.seconds_cell(
                    cell.decode_gap.median if cell.decode_gap else None
                ),
                "tokens/s": f"{cell.tokens_per_second:,.0f}" if cell.tokens_per_second else "n/a",
                "compiles (warm-up, measured)": f"{cell.warmup_compiles}, {cell.measured_compiles}",
                "error": cell.error,
            }
        )
    display(show.table(rows, caption=f"Batch 1, greedy, {study.mode}"))
    display(show.banner(study.statement, "info"))


def gaps(result: ServingResult) -> None:
    """The host-gap series in numbers: its stats and its causes."""
    series = result.gaps
    if series is None or series.gap is None:
        display(show.banner("No host-gap series was measured.", "warn"))
        return
    display(show.banner(series.sentence(), "warn" if series.flagged else "ok"))
    totals: dict[str, list[float]] = {}
    for gap, cause in zip(series.gaps, series.causes, strict=True):
        totals.setdefault(cause, []).append(gap)
    rows = [
        {
            "cause": cause,
            "gaps": len(values),
            "median": format_seconds(Measurement(values).median),
            "max": format_seconds(max(values)),
            "share of gap time": f"{sum(values) / sum(series.gaps):.0%}",
        }
        for cause, values in sorted(totals.items(), key=lambda kv: -sum(kv[1]))
    ]
    display(show.table(rows, caption=series.source))


def benchmark_keys(result: ServingResult) -> None:
    """NxD Inference's benchmark keys per batch size, as the result file keeps them."""
    rows = []
    for point in result.points:
        report = benchmark_report(point)
        row: dict[str, Any] = {"batch": point.batch_size, "mode": point.mode}
        for key in ("latency_ms_p50", "latency_ms_p90", "latency_ms_p99", "latency_ms_p100"):
            value = report.get(key)
            row[key] = "n/a" if value is None else f"{value:.4g}"
        row["throughput"] = (
            "n/a" if report["throughput"] is None else f"{report['throughput']:,.0f}"
        )
        row["n_samples"] = report["n_samples"]
        row["supported"] = ", ".join(report["supported"])
        rows.append(row)
    caption = (
        "In NxD Inference's benchmark keys (05_serving.json: data.benchmark_report): the values "
        "as NxD computes them; a report claims only the supported ones"
    )
    display(show.table(rows, caption=caption))


def problems(result: ServingResult) -> None:
    if not result.problems:
        display(show.banner("Every section measured what was asked.", "ok"))
        return
    display(
        show.table(
            [{"section": p.section, "what": p.sentence} for p in result.problems],
            caption="What could not be measured as asked (the rest was)",
        )
    )
