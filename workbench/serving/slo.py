"""The latency SLO's answer: the largest batch whose measured percentile meets it, the throughput
there and what 1,000 requests cost; when none meets it, the closest batch and what limits it."""

from __future__ import annotations

from collections.abc import Sequence

from workbench.environment.instance import InstanceType
from workbench.serving.records import BatchPoint, LoadPoint, SloAnswer, tail_cause
from workbench.timing import percentile_label
from workbench.tuning.cost import PriceTable


def _limit(point: BatchPoint, slo_s: float, q: float) -> str:
    """Why the closest batch misses the SLO, in one sentence."""
    assert point.latency is not None
    found = point.tail(q)
    assert found is not None
    label, value, _ = found
    median = point.latency.median
    if point.window_compiles:
        # Compiles inside the windows set both the median and the tail: naming the compute or
        # jitter would send the reader after the wrong cause.
        return (
            f"its median is {median * 1e3:.3g} ms and its {label} {value * 1e3:.3g} ms, set by "
            f"{tail_cause(point)}"
        )
    if median > slo_s:
        return (
            f"its median alone is {median * 1e3:.3g} ms, over the SLO: the compute of one call "
            "limits it (a faster target, a smaller model or a lower precision would move it)"
        )
    return (
        f"its median is {median * 1e3:.3g} ms but its {label} is {value / median:.1f}x that: "
        f"the tail limits it ({tail_cause(point)})"
    )


def slo_answer(
    points: Sequence[BatchPoint],
    slo_ms: float,
    q: float,
    mode: str,
    prices: PriceTable | None,
    instance: InstanceType | None,
) -> SloAnswer:
    """The SLO judged on each measured point of `mode` by its q-th percentile where its sample
    count supports one, else by its maximum (stricter, and named so)."""
    slo_s = slo_ms / 1e3
    measured = [p for p in points if p.mode == mode and p.status == "ok" and p.latency]
    meeting = [p for p in measured if (t := p.tail(q)) is not None and t[1] <= slo_s]
    if meeting:
        chosen = max(meeting, key=lambda p: p.batch_size)
        found = chosen.tail(q)
        assert found is not None
        answer = SloAnswer(
            slo_ms, q * 100, mode, chosen.batch_size, found[0], found[1] * 1e3,
            chosen.throughput,
        )  # fmt: skip
        _price(answer, prices, instance)
        return answer
    if not measured:
        return SloAnswer(slo_ms, q * 100, mode, None, percentile_label(q), None, None)
    closest = min(measured, key=lambda p: p.tail(q)[1])  # type: ignore[index]
    found = closest.tail(q)
    assert found is not None
    return SloAnswer(
        slo_ms, q * 100, mode, None, found[0], found[1] * 1e3, None, closest.batch_size,
        _limit(closest, slo_s, q),
    )  # fmt: skip


def _price(answer: SloAnswer, prices: PriceTable | None, instance: InstanceType | None) -> None:
    """USD per 1,000 requests at the chosen batch: the instance's hourly price over the requests
    one worker served in an hour at the measured throughput. An instance with several
    accelerators serves more with more workers, so this is the price of what was measured."""
    if prices is None or instance is None:
        return
    row = next((r for r in prices.rows if instance.name and r.instance == instance.name), None)
    if row is None:
        answer.cost_note = (
            f"no price for {instance.name} in {prices.path}: add one, or pass prices_file"
            if instance.name
            else f"instance type unknown ({instance.source}): set instance_type to price it"
        )
        return
    if not answer.throughput:
        return
    answer.cost_per_1000 = row.usd_per_hour / (answer.throughput * 3600) * 1000
    answer.cost_note = (
        f"{row.pricing} price of {row.instance} (${row.usd_per_hour:g}/h, {prices.path}, "
        f"{row.date}) over one worker's measured throughput; the instance's "
        f"{row.accelerators} {row.accelerator} worker(s) together serve up to that many times more"
    )


def highest_held_rate(levels: Sequence[LoadPoint]) -> float | None:
    """The highest open-loop rate up to which the SLO held at every rate tried: the first rate,
    in increasing order, where it failed ends the search (a higher rate that passed after a
    failure is the luck of one draw of arrivals, not capacity)."""
    highest = None
    for level in sorted(levels, key=lambda p: p.rate or 0.0):
        if not level.slo_held:
            break
        highest = level.rate
    return highest
